#pragma once
/// \file
/// A silent-corruption check between data-parallel replicas: under data parallelism every rank
/// holds the same parameters, bit for bit, after every step (the gradients are averaged by an
/// all-reduce whose result every rank receives whole, and each rank applies the same update).
/// A replica that differs was corrupted (a bit flipped in memory or on the device) or updated
/// differently (a step skipped, other optimizer settings). check_replicas() compares the
/// replicas by a fingerprint of each tensor, gathered in one small collective, and names the
/// ranks that diverged and the tensors that differ. The Engine handler
/// kindling::handlers::ReplicaCheck (kindling/handlers/replica_check.h) runs it every N
/// iterations; under `kindling-run --live_recovery` kindling::handlers::LiveRecovery drops a
/// diverged rank's host and the others go on (docs/fault-tolerance.md).
///
/// \code
///   auto model = kindling::dist::auto_model(net);
///   ...                                                   // some training steps
///   kindling::dist::check_replicas(*model.module());      // every rank; throws on divergence
/// \endcode
///
/// The fingerprint of a tensor is the sum, in 64-bit integers, of its bytes read as integers of
/// its element's width (32-bit words for float32, float64 and int64, 16-bit for half and
/// bfloat16, bytes for one-byte types). Integer addition is exact and does not depend on the
/// order, so equal tensors give equal sums on every device and thread count, and one flipped
/// bit changes the sum (by a power of two; no wrap-around is possible below 2^32 words). It
/// reads each tensor once (on a CPU with a loop the compiler vectorizes). Two changes that
/// cancel exactly (+2^k in one word, -2^k in another) are not seen; a checksum does not prove
/// equality, it finds corruption.
///
/// What to compare: the parameters. Buffers (BatchNorm's running statistics) are each rank's
/// own unless something keeps them equal (SyncBatchNorm, kindling/nn/batchnorm.h): compare them
/// too only then (ReplicaCheckOptions::buffers). DDP's broadcast_buffers sends rank 0's buffers
/// before each forward, which then updates each rank's copy with its own batch: they differ
/// again after every training forward. Replicas that differ by design (local SGD, a rank's own
/// adapter) are not data-parallel replicas.

#include <ATen/core/Tensor.h>

#include <string>
#include <utility>
#include <vector>

#include "kindling/dist/group.h"
#include "kindling/error.h"
#include "kindling/export.h"
#include "kindling/options.h"

namespace torch {
namespace nn {
class Module;
}  // namespace nn
}  // namespace torch

namespace kindling {
namespace dist {

/// Tensors with their names (a module's named_parameters(), in its order).
using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

/// Options of check_replicas (chain the setters).
struct KINDLING_API ReplicaCheckOptions {
  /// The module overload also compares the module's buffers (named_buffers()): only where they
  /// are kept equal on every rank (SyncBatchNorm), see the file comment. Default: false.
  KINDLING_ARG(bool, buffers) = false;
  /// Where the check runs, put in the message after "differ": e.g. "at iteration 300".
  /// Default: empty.
  KINDLING_ARG(std::string, context);
  /// The replicas' group (the data-parallel group). Default: the world.
  KINDLING_ARG(Group, group);
};

/// Thrown by check_replicas on every member of the group, with the same message there (after
/// the "[rank r/w] " prefix): the ranks that diverged and the tensors that differ.
class KINDLING_API ReplicaDivergedError : public Error {
 public:
  ReplicaDivergedError(const std::string& what, std::vector<int> diverged, std::vector<int> majority,
                       std::vector<std::string> differing)
      : Error(what), diverged_(std::move(diverged)), majority_(std::move(majority)), differing_(std::move(differing)) {}
  /// The global ranks whose replica is not the majority's; every member when no replica is
  /// held by more than half of the members (two ranks that disagree: which one is right cannot
  /// be told).
  const std::vector<int>& diverged_ranks() const { return diverged_; }
  /// The global ranks that hold the majority's replica; empty when there is no majority.
  const std::vector<int>& majority_ranks() const { return majority_; }
  /// The names of the tensors that differ between some ranks, in the order given.
  const std::vector<std::string>& differing() const { return differing_; }
  /// Whether `rank` (global) is among diverged_ranks().
  bool diverged(int rank) const;

 private:
  std::vector<int> diverged_, majority_;
  std::vector<std::string> differing_;
};

/// The fingerprint of each tensor (see the file comment): an int64 tensor of tensors.size()
/// elements, on the first tensor's device (the CPU for none). Reads every tensor once; a
/// non-contiguous one is copied first. Local; throws nothing of its own.
KINDLING_API at::Tensor replica_fingerprints(const std::vector<at::Tensor>& tensors);

/// Compares the replicas `tensors` of every member of options.group() by their fingerprints,
/// gathered in one all_gather of tensors.size() int64 values per rank, and returns when they are
/// equal. Otherwise throws kindling::dist::ReplicaDivergedError on every member with the same
/// message: with a majority (more than half of the members hold the same fingerprints) the other
/// ranks are named, each with the tensors where it differs from the majority; without one
/// (2 ranks that disagree, or a tie) every member is named. The serial model and a rank outside
/// the group compare nothing. Collective over the group: every member calls it at the same
/// point, with the same number of tensors in the same order (the same model), each of the same
/// shape and dtype on every rank. Throws what all_gather throws (kindling::TimeoutError when a
/// member does not call it).
KINDLING_API void check_replicas(const NamedTensors& tensors,
                                 const ReplicaCheckOptions& options = ReplicaCheckOptions());

/// check_replicas over `module`'s named_parameters() (and named_buffers() with
/// options.buffers()), by their names in the module (for a DDP model pass `*model.module()`,
/// the module it wraps). Collective as above; throws what it throws.
KINDLING_API void check_replicas(const torch::nn::Module& module,
                                 const ReplicaCheckOptions& options = ReplicaCheckOptions());

}  // namespace dist
}  // namespace kindling
