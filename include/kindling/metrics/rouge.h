#pragma once
/// \file
/// ROUGE (ignite's, Lin 2004): RougeN (n-gram co-occurrences), RougeL (longest common
/// subsequence) and Rouge (several of them at once). Each variant's value is its mean
/// precision, recall and F-measure over the candidates, named as ignite's keys: "Rouge-2-P",
/// "Rouge-2-R", "Rouge-2-F", "Rouge-L-P", ... Input: token sequences (token_sequences.h).
///
/// \code
///   auto rouge = std::make_shared<kindling::metrics::Rouge>(std::vector<int>{1, 2, kindling::metrics::Rouge::kL});
///   rouge->attach(evaluator, "rouge");   // state().metrics["Rouge-L-F"], ... and "rouge" (all)
/// \endcode
///
/// Ranks: update() is local; compute() is a collective (every rank calls it, in the same
/// order): per-variant sums of precision, recall and F-measure and the candidate count,
/// summed over ranks. Checkpointed and resharded to another world size by sums (Reshard::kSum).

#include <string>
#include <vector>

#include "kindling/metrics/token_sequences.h"

namespace kindling {
namespace metrics {

class KINDLING_API Rouge : public TokenMetric {
 public:
  /// The variant that is RougeL in a list of variants (the others are n-gram orders).
  static constexpr int kL = 0;
  /// How a candidate's scores against several references combine: kAverage sums the counts
  /// over the references, kBest keeps the reference of the highest recall (the first one).
  enum class MultiRef { kAverage, kBest };
  /// `variants`: n-gram orders (at least 1) and kL; empty: {1, 2, 4, kL} (ignite's default).
  /// `alpha` in [0, 1] weighs precision against recall in the F-measure (0: recall only).
  /// Throws kindling::UsageError for a variant out of range or alpha outside [0, 1].
  explicit Rouge(std::vector<int> variants = {}, MultiRef multiref = MultiRef::kAverage, double alpha = 0,
                 OutputTransform output_transform = {}, c10::Device device = c10::Device(c10::kCPU));
  void reset() override;
  /// {"Rouge-<v>-P", "Rouge-<v>-R", "Rouge-<v>-F"} for each variant v, over every rank's
  /// candidates (a collective). Throws NotComputableError when no rank saw a candidate.
  Value compute() override;
  std::string name() const override { return "Rouge"; }

 protected:
  /// Throws kindling::UsageError when a candidate has no reference; stores nothing then.
  void add(const TokenBatch& batch) override;

 private:
  std::vector<int> variants_;
  MultiRef multiref_;
  double alpha_;
  at::Tensor precision_, recall_, fmeasure_;  // float64, one per variant
  int64_t num_examples_ = 0;
};

/// ROUGE-N: the variant of n-gram order `ngram` (ignite's default 4) alone.
class KINDLING_API RougeN : public Rouge {
 public:
  /// Throws kindling::UsageError for ngram < 1 or alpha outside [0, 1].
  explicit RougeN(int ngram = 4, MultiRef multiref = MultiRef::kAverage, double alpha = 0,
                  OutputTransform output_transform = {}, c10::Device device = c10::Device(c10::kCPU));
  std::string name() const override { return "RougeN"; }
};

/// ROUGE-L: the longest-common-subsequence variant alone.
class KINDLING_API RougeL : public Rouge {
 public:
  /// Throws kindling::UsageError for alpha outside [0, 1].
  explicit RougeL(MultiRef multiref = MultiRef::kAverage, double alpha = 0, OutputTransform output_transform = {},
                  c10::Device device = c10::Device(c10::kCPU));
  std::string name() const override { return "RougeL"; }
};

}  // namespace metrics
}  // namespace kindling
