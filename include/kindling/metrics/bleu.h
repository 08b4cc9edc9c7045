#pragma once
/// \file
/// Bleu (ignite's, Papineni et al. 2002): the geometric mean of the modified n-gram
/// precisions up to `ngram`, times the brevity penalty, with ignite's smoothing methods.
/// Input: token sequences (token_sequences.h).
///
/// \code
///   auto bleu = std::make_shared<kindling::metrics::Bleu>(4, kindling::metrics::Bleu::Smooth::kSmooth1);
///   bleu->attach(evaluator, "bleu");   // output: (candidates (N, L), references (N, R, L)) token ids
/// \endcode
///
/// Ranks: update() is local; compute() is a collective (every rank calls it, in the same
/// order): macro sums each sentence's BLEU and counts sentences, micro sums the n-gram counts
/// and lengths (corpus BLEU over every rank's sentences). Checkpointed and resharded to
/// another world size by sums (Reshard::kSum).

#include <string>

#include "kindling/metrics/token_sequences.h"

namespace kindling {
namespace metrics {

class KINDLING_API Bleu : public TokenMetric {
 public:
  /// ignite's smooth argument: "no_smooth", "smooth1" (zero counts become 0.1), "nltk_smooth2"
  /// and "smooth2" (add one to the counts of orders 2 and up; nltk's with denominators at least 1).
  enum class Smooth { kNoSmooth, kSmooth1, kNltkSmooth2, kSmooth2 };
  /// kMacro: the mean of the sentences' BLEU; kMicro: the corpus BLEU of all sentences.
  enum class Average { kMacro, kMicro };
  /// Throws kindling::UsageError when ngram < 1.
  explicit Bleu(int64_t ngram = 4, Smooth smooth = Smooth::kNoSmooth, OutputTransform output_transform = {},
                c10::Device device = c10::Device(c10::kCPU), Average average = Average::kMacro);
  void reset() override;
  /// Over every rank's sentences (a collective). Throws NotComputableError when no rank saw
  /// a sentence (macro; micro gives 0, as ignite).
  Value compute() override;
  std::string name() const override { return "Bleu"; }

 protected:
  /// Throws kindling::UsageError when a candidate has no reference; stores nothing then.
  void add(const TokenBatch& batch) override;

 private:
  /// BLEU from n-gram counts (index 1..ngram) and the summed lengths.
  double score(const at::Tensor& numerators, const at::Tensor& denominators, double hyp_length,
               double ref_length) const;
  int64_t ngram_;
  Smooth smooth_;
  Average average_;
  at::Tensor sum_of_bleu_;                   // macro: float64, 0-dim
  int64_t num_sentences_ = 0;                // macro
  at::Tensor numerators_, denominators_;     // micro: float64, (ngram + 1,), index 0 unused
  int64_t hyp_length_ = 0, ref_length_ = 0;  // micro
};

}  // namespace metrics
}  // namespace kindling
