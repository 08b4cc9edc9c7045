#pragma once
/// \file
/// PowerSGD gradient compression (Vogels, Karimireddy and Jaggi, 2019) as a communication hook
/// of kindling's DistributedDataParallel, with the semantics of torch's `powerSGD_hook` and
/// `PowerSGDState` (the same defaults, the same random state, the same results up to float
/// rounding: tests/nn/powersgd_test.cpp checks it against torch's own hook).
///
/// \code
///   auto hook = kindling::nn::powerSGD_hook(kindling::nn::PowerSgdOptions()
///                                               .matrix_approximation_rank(2)
///                                               .start_powerSGD_iter(10));
///   auto model = kindling::dist::auto_model(Net(), kindling::nn::DdpOptions().comm_hook(hook));
///   kindling::handlers::Objects to_save{{"model", stateful(model)}, {"powersgd", stateful(hook)}};
/// \endcode
///
/// Each gradient of a bucket is seen as a matrix (its first dimension by the rest). Before
/// iteration `start_powerSGD_iter` (counted in synchronised backwards) buckets are averaged
/// by one all-reduce. From then on, a gradient M of n x m whose rank-r approximation is smaller
/// by at least `min_compression_rate` ((n + m) r * rate < n m) is replaced by P Q^T, where
/// P = orthogonalize(sum over ranks of M Q) and Q = (sum over ranks of M^T P) / world: two
/// all-reduces of n r and m r values instead of n m. The other gradients (biases, small
/// matrices) are averaged uncompressed. With error feedback, what the approximation lost on
/// this rank is added to the next step's gradient; with warm start, the last Q starts the next
/// power iteration (otherwise Q is drawn anew from the hook's random state).
///
/// Differences from torch: kindling's buckets never change after construction, so
/// `start_powerSGD_iter` may be 1 or 0 (torch requires > 1 because its DDP rebuilds buckets
/// after the first iteration); tensors of equal shape are not batched
/// (torch's batch_tensors_with_same_shape=false, its default).
#include <cstdint>
#include <memory>
#include <string>

#include "kindling/dist/group.h"
#include "kindling/engine/state_dict.h"
#include "kindling/export.h"
#include "kindling/nn/comm_hook.h"
#include "kindling/options.h"

namespace kindling {
namespace nn {
namespace detail {
struct PowerSgdState;
}

/// PowerSGD's settings; names and defaults as torch's PowerSGDState.
struct KINDLING_API PowerSgdOptions {
  /// The ranks that reduce together: the DDP model's group. Default: every rank.
  KINDLING_ARG(dist::Group, group);
  /// r, the rank of each gradient's approximation (>= 1). Larger is more exact and moves
  /// more bytes. Default 1.
  KINDLING_ARG(int64_t, matrix_approximation_rank) = 1;
  /// The first iteration (0-based count of synchronised backwards) that compresses; earlier
  /// ones all-reduce uncompressed, which helps accuracy at the start of training. Default 1000.
  KINDLING_ARG(int64_t, start_powerSGD_iter) = 1000;
  /// A gradient is compressed only when its approximation is this many times smaller (>= 0).
  /// Default 2.
  KINDLING_ARG(double, min_compression_rate) = 2;
  /// Carry this rank's approximation error into its next gradient. Default true.
  KINDLING_ARG(bool, use_error_feedback) = true;
  /// Start each power iteration from the last one's Q. Default true.
  KINDLING_ARG(bool, warm_start) = true;
  /// Added to each column's norm when orthogonalizing with Gram-Schmidt (r <= 2), to avoid a
  /// division by zero (>= 0). Default 0.
  KINDLING_ARG(double, orthogonalization_epsilon) = 0;
  /// Seeds the draws of the initial Q (numpy's RandomState(seed), as torch). Default 0.
  KINDLING_ARG(uint32_t, random_seed) = 0;
};

/// The PowerSGD hook; one object serves one DDP model, on every rank of its group.
class KINDLING_API PowerSgdHook : public CommHook {
 public:
  /// Throws kindling::UsageError for an option out of range (named, with the value seen).
  explicit PowerSgdHook(PowerSgdOptions options = PowerSgdOptions());
  ~PowerSgdHook() override;
  /// "powerSGD".
  std::string name() const override;
  /// Averages (or approximates) one bucket; see the file comment. Throws
  /// kindling::UsageError when called with another group than the options', or when the
  /// buckets change shape between calls (one hook shared by two models); otherwise what the
  /// collectives throw.
  std::unique_ptr<PendingBucket> run(GradBucket& bucket, const dist::Group& group) override;
  /// The iteration counter, the random state, every rank's error-feedback memory (gathered:
  /// call on every rank of the group), the warm-start Q of each bucket, the compression
  /// statistics and the options. Tensors are saved on the CPU.
  StateDict state_dict() const override;
  /// Restores a state_dict(), on every rank of the group (local). Throws kindling::UsageError
  /// when a key is missing or of the wrong type or when the options differ from this hook's.
  /// Saved at another world size, the error-feedback memory (per rank) cannot be assigned to
  /// the new ranks: it is dropped with a warning and the rest is restored.
  void load_state_dict(const StateDict& state) override;

  /// The options this hook was made with.
  const PowerSgdOptions& options() const;
  /// Synchronised backwards seen so far (torch's PowerSGDState.iter).
  int64_t iteration() const;
  /// Elements before and after compression, summed over every compressed bucket so far, and
  /// their ratio (0 while nothing was compressed): torch's compression_stats().
  struct Stats {
    double rate = 0;
    int64_t numel_before = 0;
    int64_t numel_after = 0;
  };
  /// See Stats. Local, does not throw.
  Stats compression_stats() const;

 private:
  std::shared_ptr<detail::PowerSgdState> impl_;
};

/// A new PowerSGD hook (torch's `powerSGD_hook` with a fresh PowerSGDState). Throws as
/// PowerSgdHook's constructor.
KINDLING_API std::shared_ptr<PowerSgdHook> powerSGD_hook(PowerSgdOptions options = PowerSgdOptions());

}  // namespace nn
}  // namespace kindling
