#pragma once
/// \file
/// Token sequences for the text metrics (Bleu, RougeN, RougeL, Rouge: ignite.metrics.nlp) and
/// ignite's nlp.utils functions on them: ngrams, lcs, modified_precision.
///
/// A metric reads a batch from the engine as two integer tensors: candidates (N, L), one
/// sequence of token ids per row, and references (N, R, L), R reference sequences per
/// candidate. Negative entries are padding and skipped (so sequences of different lengths, and
/// candidates with fewer references, share one tensor: pad with -1; a reference that is all
/// padding is no reference). Without an engine, TokenMetric::update_words takes the words.
///
/// \code
///   auto bleu = std::make_shared<kindling::metrics::Bleu>(4, kindling::metrics::Bleu::Smooth::kSmooth1);
///   bleu->update_words({{"the", "cat", "sat"}}, {{{"the", "cat", "sat", "down"}}});
///   double score = bleu->compute().number();
/// \endcode
///
/// Ranks: the functions are local; the metrics as declared in bleu.h and rouge.h.

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "kindling/metrics/metric.h"

namespace kindling {
namespace metrics {

/// One sequence of token ids.
using TokenSequence = std::vector<int64_t>;

/// The n-grams of `sequence` and how often each occurs (ignite's ngrams, a Counter): none
/// when n exceeds its length. Local. Throws kindling::UsageError when n < 1.
KINDLING_API std::map<TokenSequence, int64_t> ngrams(const TokenSequence& sequence, int64_t n);
/// The length of the longest common subsequence of a and b (ignite's lcs). Local; O(|a| |b|).
KINDLING_API int64_t lcs(const TokenSequence& a, const TokenSequence& b);
/// BLEU's modified precision of `candidate` against `references` for n-grams: (matches, each
/// n-gram's count clipped to its largest count in a reference; the candidate's n-grams). Local.
/// Throws kindling::UsageError when n < 1.
KINDLING_API std::pair<int64_t, int64_t> modified_precision(const std::vector<TokenSequence>& references,
                                                            const TokenSequence& candidate, int64_t n);

/// A batch of candidates and, for each, its references.
struct TokenBatch {
  std::vector<TokenSequence> candidates;
  std::vector<std::vector<TokenSequence>> references;
};

/// What the text metrics share: reading a batch from the engine's output or from words.
class KINDLING_API TokenMetric : public Metric {
 public:
  /// Reads (candidates (N, L), references (N, R, L)) integer tensors (see the file comment).
  /// Throws kindling::UsageError naming the metric for other shapes or types, or different N;
  /// stores nothing then.
  void update(const Value& output) override;
  /// The same from words: candidates[i] is a list of words and references[i] its references.
  /// Local. Throws kindling::UsageError naming the metric when the two lists differ in length.
  void update_words(const std::vector<std::vector<std::string>>& candidates,
                    const std::vector<std::vector<std::vector<std::string>>>& references);

 protected:
  using Metric::Metric;
  /// Accumulates one batch (candidates and references of the same length).
  virtual void add(const TokenBatch& batch) = 0;
};

}  // namespace metrics
}  // namespace kindling
