#pragma once
/// \file
/// Precision and Recall (ignite's). Precision = TP / (TP + FP) (the predicted positives),
/// Recall = TP / (TP + FN) (the actual positives), per class, combined as `average` says.
/// Inputs as Accuracy's (see classification.h): binary and multilabel predictions must be
/// thresholded to 0/1; multiclass predictions are scores, and their argmax over dimension 1
/// is the predicted class. A class with an empty denominator counts as 0 (the denominator
/// gets eps = 1e-20).
///
/// \code
///   auto precision = std::make_shared<Precision>(OutputTransform(), Precision::Average::kMacro);
///   precision->attach(evaluator, "precision");   // a number
///   auto recall = std::make_shared<Recall>();      // Recall::Average::kFalse: one value per class
///   recall->attach(evaluator, "recall");           // a (C,) tensor (a number for binary input)
/// \endcode
///
/// Ranks: update() is local; compute() sums the counts over ranks (a collective on every
/// rank). A rank that saw no input takes part with zeros.

#include <string>

#include "kindling/metrics/classification.h"

namespace kindling {
namespace metrics {

/// What Precision and Recall share (ignite's _BasePrecisionRecall). Not used directly.
class KINDLING_API PrecisionRecallBase : public ClassificationMetric {
 public:
  /// How the classes are combined (ignite's `average` argument). Nested because
  /// kindling::metrics::Average is the Average metric: write Precision::Average::kMacro.
  enum class Average {
    kNone,      // ignite None: the per-class (C,) float64 tensor; binary input counts as 2 classes: (2,)
    kFalse,     // ignite False (the default): per-class (C,) tensor; binary input measures class 1 only: a number
    kMacro,     // ignite 'macro' (and True): the mean of the per-class values, a number
    kMicro,     // ignite 'micro': one value from the counts summed over classes, a number
    kWeighted,  // ignite 'weighted': per-class values weighted by their support (count in y), a number
    kSamples,   // ignite 'samples': the per-sample value averaged over samples, a number (multilabel only)
  };

  Average average() const { return average_; }

  void reset() override;
  /// Throws kindling::UsageError for shapes, types or values that do not fit (see
  /// classification.h), Average::kSamples with binary or multiclass input, and multiclass
  /// targets outside [0, C).
  void update(const Value& output) override;
  /// The value described by average() over all ranks' inputs (a collective: every rank).
  /// Throws NotComputableError when no rank has updated since reset(), and
  /// kindling::UsageError when ranks saw different numbers of classes.
  Value compute() override;

 protected:
  /// `precision`: count the predicted positives (Precision), else the actual ones (Recall).
  PrecisionRecallBase(OutputTransform output_transform, Average average, bool is_multilabel, c10::Device device,
                      bool precision);

 private:
  Average average_;
  bool precision_;
  bool warned_ = false;
  // 1-D float64 accumulators of width_ entries (1 for micro, samples and binary+kFalse, else
  // the number of classes); undefined and width_ 0 before the first update.
  at::Tensor numerator_, denominator_, weight_;
  int64_t width_ = 0;
};

/// ignite's spelling: "None", "False", "macro", "micro", "weighted", "samples".
KINDLING_API const char* to_string(PrecisionRecallBase::Average average);

class KINDLING_API Precision : public PrecisionRecallBase {
 public:
  explicit Precision(OutputTransform output_transform = {}, Average average = Average::kFalse,
                     bool is_multilabel = false, c10::Device device = c10::Device(c10::kCPU));
  std::string name() const override { return "Precision"; }
};

class KINDLING_API Recall : public PrecisionRecallBase {
 public:
  explicit Recall(OutputTransform output_transform = {}, Average average = Average::kFalse, bool is_multilabel = false,
                  c10::Device device = c10::Device(c10::kCPU));
  std::string name() const override { return "Recall"; }
};

}  // namespace metrics
}  // namespace kindling
