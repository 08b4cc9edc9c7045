#pragma once
/// \file
/// Information-theoretic means over predictions given as unnormalized logits (ignite's):
/// Entropy, KLDivergence, JSDivergence and MutualInformation. Inputs of shape (N, C) or
/// (N, C, ...), classes in dimension 1; a (N, C, d1, ...) input counts N * d1 * ... samples
/// (one per position, as ignite's segmentation maps). Softmax and logarithms in float64.
///
/// \code
///   auto kl = std::make_shared<kindling::metrics::KLDivergence>();   // (y_pred, y): logits
///   kl->attach(evaluator, "kl");
/// \endcode
///
/// Ranks: update() is local; compute() is a collective (every rank calls it, in the same
/// order). Checkpointed and resharded to another world size by sums (Reshard::kSum).

#include <string>

#include "kindling/metrics/metric.h"
#include "kindling/metrics/sample_means.h"

namespace kindling {
namespace metrics {

/// The mean entropy -sum_c p_c log p_c of softmax(y_pred) over the classes. Reads y_pred
/// only (the output may be (y_pred, y), y unused, or y_pred alone).
class KINDLING_API Entropy : public SampleMean {
 public:
  explicit Entropy(OutputTransform output_transform = {}, c10::Device device = c10::Device(c10::kCPU));
  std::string name() const override { return "Entropy"; }

 protected:
  /// Throws kindling::UsageError for a y_pred of fewer than 2 dimensions or not floating point.
  at::Tensor per_sample(const at::Tensor& y_pred, const at::Tensor& y) const override;
};

/// The mean Kullback-Leibler divergence KL(p || q) of the target distribution p = softmax(y)
/// from the prediction q = softmax(y_pred); y_pred and y are logits of the same shape.
class KINDLING_API KLDivergence : public SampleMean {
 public:
  explicit KLDivergence(OutputTransform output_transform = {}, c10::Device device = c10::Device(c10::kCPU));
  std::string name() const override { return "KLDivergence"; }

 protected:
  /// Throws kindling::UsageError when the shapes differ, are 1-D, or are not floating point.
  at::Tensor per_sample(const at::Tensor& y_pred, const at::Tensor& y) const override;
};

/// The mean Jensen-Shannon divergence (KL(p || m) + KL(q || m)) / 2, m = (p + q) / 2, of
/// p = softmax(y) and q = softmax(y_pred); y_pred and y are logits of the same shape.
class KINDLING_API JSDivergence : public SampleMean {
 public:
  explicit JSDivergence(OutputTransform output_transform = {}, c10::Device device = c10::Device(c10::kCPU));
  std::string name() const override { return "JSDivergence"; }

 protected:
  /// Throws kindling::UsageError when the shapes differ, are 1-D, or are not floating point.
  at::Tensor per_sample(const at::Tensor& y_pred, const at::Tensor& y) const override;
};

/// The mutual information between the inputs and the predicted class: the entropy of the
/// mean predicted distribution minus the mean entropy of each prediction (softmax(y_pred)),
/// clamped at 0 as ignite's (a NaN stays NaN: a -inf or NaN logit gives NaN, as Entropy's).
/// Reads y_pred only.
class KINDLING_API MutualInformation : public Metric {
 public:
  explicit MutualInformation(OutputTransform output_transform = {}, c10::Device device = c10::Device(c10::kCPU));
  void reset() override;
  /// Throws kindling::UsageError for a y_pred of fewer than 2 dimensions, not floating point,
  /// or with another number of classes than the earlier batches; stores nothing then.
  void update(const Value& output) override;
  /// Over every rank's samples (a collective). Throws NotComputableError when no rank saw a
  /// sample, kindling::UsageError when ranks saw different numbers of classes (naming both).
  Value compute() override;
  std::string name() const override { return "MutualInformation"; }

 private:
  at::Tensor sum_of_probabilities_;  // float64, (C,) once a batch was seen, else a 0-dim 0
  at::Tensor sum_of_entropies_;      // float64, 0-dim
  int64_t num_examples_ = 0;
};

}  // namespace metrics
}  // namespace kindling
