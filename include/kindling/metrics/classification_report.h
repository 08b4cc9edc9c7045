#pragma once
/// \file
/// ClassificationReport (ignite's): per class, the precision, the recall and the F-beta score,
/// and their plain means over the classes ("macro avg"), from one Precision, one Recall and one
/// Fbeta (average false) that it owns.
///
/// \code
///   auto report = std::make_shared<ClassificationReport>();       // beta 1, multiclass
///   report->attach(evaluator, "report");
///   evaluator.run(loader);
///   const Value& r = evaluator.state().metrics.at("report");
///   double p = r["2/precision"].item<double>();                    // ignite: cr["2"]["precision"]
///   std::string text = report->json(r);                            // ignite's output_dict=False string
/// \endcode
///
/// The value is named 0-dim float64 tensors, "<label>/precision", "<label>/recall",
/// "<label>/f<beta>-score" for each class and "macro avg/..." (ignite's nested dict
/// {label: {...}, "macro avg": {...}} with its keys joined by '/'; a logger logs each entry).
/// Labels are "0", "1", ... or the given names, in class order. json() writes ignite's string
/// (output_dict false, json.dumps: the classes in order, then "macro avg").
///
/// Ranks: as Precision and Recall: computing it is a collective on every rank, exact across
/// ranks (uneven and empty shards equal one process).

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kindling/export.h"
#include "kindling/metrics/metrics_lambda.h"

namespace kindling {
namespace metrics {

class KINDLING_API ClassificationReport : public MetricsLambda {
 public:
  /// `beta` > 0 (ignite's int: the key is "f<beta>-score"); `is_multilabel`: y_pred and y of
  /// shape (N, C, ...) with 0/1 entries, else multiclass scores (N, C, ...) and labels (N, ...);
  /// `labels`: the classes' names (at least as many as classes; "0", "1", ... when empty).
  /// Throws kindling::UsageError for beta < 1. compute() throws kindling::UsageError for
  /// binary input (ignite fails there too: give (N, 2) scores) or fewer labels than classes,
  /// and what Precision and Recall throw.
  explicit ClassificationReport(int beta = 1, bool is_multilabel = false, std::vector<std::string> labels = {},
                                OutputTransform output_transform = {},
                                std::optional<c10::Device> device = std::nullopt);
  std::string name() const override { return "ClassificationReport"; }

  /// ignite's output_dict=False result for a value this metric computed: json.dumps of
  /// {"<label>": {"precision": p, "recall": r, "f<beta>-score": f}, ..., "macro avg": {...}}
  /// (", " and ": " separators, numbers as Python's repr). Throws kindling::UsageError for a
  /// value this metric did not make. Local.
  std::string json(const engine::Value& report) const;

 private:
  struct Parts;  // the lambda's function and its Recall, Precision and Fbeta
  static Parts make_parts(int beta, bool is_multilabel, const std::vector<std::string>& labels,
                          OutputTransform output_transform, std::optional<c10::Device> device);
  ClassificationReport(const Parts& parts, int beta, std::vector<std::string> labels);
  int beta_;
  std::vector<std::string> labels_;
};

}  // namespace metrics
}  // namespace kindling
