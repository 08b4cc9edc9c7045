#pragma once
/// \file
/// Communication hooks of kindling's DistributedDataParallel (torch's DDP comm hooks): what
/// happens to a bucket of gradients once it is complete. The default averages it with one
/// all-reduce; the built-in hooks compress it first (fp16 / bf16: half the bytes on the wire).
///
/// \code
///   auto model = kindling::dist::auto_model(Net(), kindling::nn::DdpOptions().comm_hook(
///       kindling::nn::fp16_compress_hook()));
/// \endcode
///
/// A hook runs on every rank of the DDP group, bucket by bucket in index order (the same order
/// everywhere), from the autograd thread that completes the bucket; its result is waited on at
/// the end of backward, before the averaged gradients are copied into `.grad()`.
#include <ATen/core/Tensor.h>

#include <memory>
#include <string>
#include <vector>

#include "kindling/dist/group.h"
#include "kindling/engine/state_dict.h"
#include "kindling/export.h"

namespace kindling {
namespace dist {
class HostHierarchy;
}
namespace nn {

/// One complete bucket: its gradients laid end to end in `buffer` (this rank's values; the
/// hook leaves the group's average there).
struct KINDLING_API GradBucket {
  int64_t index = 0;                   ///< 0 for the first bucket of a backward (the last layers' gradients)
  bool is_last = false;                ///< the backward's last bucket
  at::Tensor buffer;                   ///< flat, in the parameters' dtype and on their device
  std::vector<at::Tensor> gradients;   ///< each parameter's gradient, a view into `buffer`
  std::vector<at::Tensor> parameters;  ///< the parameters, in the order of `gradients`
};

/// The communication a hook started for one bucket.
class KINDLING_API PendingBucket {
 public:
  virtual ~PendingBucket();
  /// Waits until the group's average is in the bucket's buffer. Throws what the collectives
  /// throw (kindling::TimeoutError, kindling::CommunicationError).
  virtual void wait() = 0;
};

/// What nn::Join (kindling/nn/join.h) needs to mirror a hook on a rank that joined early
/// (CommHook::join_needs). Each field is empty, or the reason Join gives, with what to do, when
/// it cannot do without it.
struct KINDLING_API JoinNeeds {
  /// Join cannot mirror the hook at all (it steps an optimizer inside backward, before Join
  /// could scale the gradients of the ranks still training): Join refuses the model, saying this.
  std::string refusal;
  /// The training ranks' step communicates for the hook (ZeRO's all-gather): a joined rank's
  /// join() must run it (`after_each_backward`), and without it throws, saying this.
  std::string step;
};

/// A communication hook (torch's register_comm_hook). One object serves one DDP model.
class KINDLING_API CommHook {
 public:
  virtual ~CommHook();
  /// The hook's name, for logs ("allreduce", "fp16_compress", ...).
  virtual std::string name() const = 0;
  /// What nn::Join needs to mirror this hook on a rank that joined early (asked by Join's
  /// constructor and join(), on every rank). The default, nothing: running the hook on zero
  /// gradients mirrors it. Local; never throws.
  virtual JoinNeeds join_needs() const;
  /// Starts averaging `bucket` over `group` (of `group.size()` ranks). Called on every rank of
  /// the group for every bucket, in index order; it must start the same collectives everywhere.
  virtual std::unique_ptr<PendingBucket> run(GradBucket& bucket, const dist::Group& group) = 0;
  /// The hook's state for a checkpoint (handlers::stateful(hook)); empty for a stateless hook.
  /// Called on every rank of the group between backwards: a hook may gather per-rank state.
  virtual StateDict state_dict() const;
  /// Restores what state_dict() saved, on every rank of the group before the next backward.
  /// Throws kindling::UsageError naming what does not fit, and then changes nothing; a
  /// stateless hook accepts only an empty dict.
  virtual void load_state_dict(const StateDict& state);
};

/// torch's allreduce_hook: divide by the group's size, then one sum all-reduce.
KINDLING_API std::shared_ptr<CommHook> allreduce_hook();
/// torch's fp16_compress_hook: the buffer cast to float16, divided by the group's size in
/// float16, sum-all-reduced, and cast back into the buffer (values beyond float16's range
/// become infinite, as in torch).
KINDLING_API std::shared_ptr<CommHook> fp16_compress_hook();
/// torch's bf16_compress_hook: as fp16_compress_hook with bfloat16 (float32's range, 8 bits of
/// mantissa). Halves the bytes on nccl, mpi, and on gloo where LibTorch's gloo sums bfloat16
/// (2.15 does); on older LibTorch (1.13) gloo cannot, kindling widens the buffer to float32
/// for the sum, and the bytes on the wire are not halved: use fp16_compress_hook there.
KINDLING_API std::shared_ptr<CommHook> bf16_compress_hook();

/// Horovod's hierarchical all-reduce as a hook (kindling/dist/hierarchy.h): each bucket,
/// divided by the group's size, is summed inside each host, then among one leader per host,
/// then broadcast inside the host, all while backward goes on (HostHierarchy::all_reduce_async). Collective over the world (it builds a
/// dist::HostHierarchy): every rank calls it, in the same order; the DDP group must be the
/// world. DDP uses it by itself where it sends fewer bytes over the host links
/// (DdpOptions::hierarchical_allreduce).
KINDLING_API std::shared_ptr<CommHook> hierarchical_allreduce_hook();
/// The same over a hierarchy already built (local; several models may share one).
KINDLING_API std::shared_ptr<CommHook> hierarchical_allreduce_hook(std::shared_ptr<const dist::HostHierarchy> hosts);

}  // namespace nn
}  // namespace kindling
