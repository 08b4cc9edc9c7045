#pragma once
/// \file
/// CharacterErrorRate (ignite's): the Levenshtein distance (substitutions, deletions and
/// insertions) from each reference to its prediction, summed, over the references' summed
/// length; 0 when the references are all empty and nothing was predicted, 1 when they are all
/// empty and something was.
///
/// From an engine, a batch is (predictions (N, L), references (N, L)) integer tensors of
/// character codes, negative entries padding (skipped); without one, update_text() takes the
/// strings (UTF-8; characters are Unicode code points, as Python's).
///
/// \code
///   kindling::metrics::CharacterErrorRate cer;
///   cer.update_text({"kitten"}, {"sitting"});   // 3 edits over 7 characters
///   double rate = cer.compute().number();
/// \endcode
///
/// Ranks: update() is local; compute() is a collective (every rank calls it, in the same
/// order): errors, reference characters and updates summed over ranks (ignite sums the first
/// two only, so a rank that saw nothing cannot compute there). Checkpointed and resharded to
/// another world size by sums (Reshard::kSum).

#include <string>
#include <vector>

#include "kindling/metrics/metric.h"

namespace kindling {
namespace metrics {

class KINDLING_API CharacterErrorRate : public Metric {
 public:
  explicit CharacterErrorRate(OutputTransform output_transform = {}, c10::Device device = c10::Device(c10::kCPU));
  void reset() override;
  /// Reads (predictions, references) as (N, L) integer tensors of character codes (see above).
  /// Throws kindling::UsageError for other shapes or types; stores nothing then.
  void update(const Value& output) override;
  /// The same from strings, predictions[i] against references[i]. Local. Throws
  /// kindling::UsageError when the lists differ in length or a string is not valid UTF-8.
  void update_text(const std::vector<std::string>& predictions, const std::vector<std::string>& references);
  /// Over every rank's pairs (a collective). Throws NotComputableError when no rank was updated.
  Value compute() override;
  std::string name() const override { return "CharacterErrorRate"; }

 private:
  void add(const std::vector<std::vector<int64_t>>& predictions, const std::vector<std::vector<int64_t>>& references);
  at::Tensor errors_, reference_length_;  // float64, 0-dim (ignite's _num_errors, _num_refs)
  int64_t num_updates_ = 0;
};

/// The Levenshtein distance between two sequences of characters (or of any ids). Local; O(|a| |b|).
KINDLING_API int64_t edit_distance(const std::vector<int64_t>& a, const std::vector<int64_t>& b);

}  // namespace metrics
}  // namespace kindling
