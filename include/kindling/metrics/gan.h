#pragma once
/// \file
/// ignite.metrics.gan: FID (Fréchet distance between the feature distributions of real and
/// generated samples) and InceptionScore (exp of the mean KL divergence of each sample's class
/// probabilities from their mean), over the features that `feature_extractor` makes of each
/// batch (empty: the inputs are the features, ignite's Identity).
///
/// \code
///   auto fid = std::make_shared<FID>(2048, [&](const at::Tensor& images) { return net->features(images); });
///   fid->attach(evaluator, "fid");                      // output: (real images, generated images)
///   auto is = std::make_shared<InceptionScore>(10, [&](const at::Tensor& x) { return
///   at::softmax(classifier->forward(x), 1); });
/// \endcode
///
/// ignite's default extractor, when neither num_features nor feature_extractor is given, is
/// torchvision's Inception-v3 with weights downloaded at run time; kindling has no such model
/// (no Debian or PyPI package ships the weights): give the extractor and its feature count.
/// The extractor runs without gradients; its output is read as float64.
///
/// Ranks: update() is local; compute() is a collective (every rank calls it, in the same order),
/// exact across ranks (sums). Checkpointed and resharded to another world size by sums.

#include <functional>
#include <string>

#include "kindling/metrics/metric.h"

namespace kindling {
namespace metrics {

/// Features (or class probabilities) of a batch: (N, ...) inputs -> (N, num_features).
using FeatureExtractor = std::function<at::Tensor(const at::Tensor&)>;

/// ignite's FID: |mu_real - mu_fake|^2 + tr(S_real + S_fake - 2 (S_real S_fake)^(1/2)) of the
/// features' means and covariances (unbiased). The output is (real, generated) batches of the
/// same shape. tr((S_real S_fake)^(1/2)) is the sum of the square roots of the eigenvalues of
/// S_real^(1/2) S_fake S_real^(1/2) (symmetric, so computed with eigh: the same number as
/// ignite's scipy.linalg.sqrtm of the product, without its complex round-off).
class KINDLING_API FID : public Metric {
 public:
  /// Throws kindling::UsageError for num_features < 1.
  explicit FID(int64_t num_features, FeatureExtractor feature_extractor = {}, OutputTransform output_transform = {},
               c10::Device device = c10::Device(c10::kCPU));
  void reset() override;
  /// Throws kindling::UsageError when the output is not (real, generated), the two feature
  /// batches differ in shape, are not (N, num_features) or are empty; stores nothing then.
  void update(const Value& output) override;
  /// Over every rank's samples (a collective). Throws NotComputableError with fewer than 2
  /// samples over all ranks (a covariance needs 2); kindling::UsageError, on every rank, when
  /// a feature was NaN or inf (ignite 0.5.5 raises scipy's ValueError there).
  Value compute() override;
  std::string name() const override { return "FID"; }

 private:
  int64_t num_features_;
  FeatureExtractor extractor_;
  at::Tensor real_total_, real_sigma_, fake_total_, fake_sigma_;  // float64 sums of x and x x^T
  int64_t num_examples_ = 0;
};

/// ignite's InceptionScore: exp(mean over samples of KL(p(y|x) || p(y))), p(y|x) the
/// extractor's (N, num_features) class probabilities of each input and p(y) their mean, with
/// ignite's 1e-16 inside the logarithms. The output is the batch of inputs.
class KINDLING_API InceptionScore : public Metric {
 public:
  /// Throws kindling::UsageError for num_features < 1.
  explicit InceptionScore(int64_t num_features, FeatureExtractor feature_extractor = {},
                          OutputTransform output_transform = {}, c10::Device device = c10::Device(c10::kCPU));
  void reset() override;
  /// Throws kindling::UsageError when the probabilities are not (N, num_features) with N > 0.
  void update(const Value& output) override;
  /// Over every rank's samples (a collective). Throws NotComputableError when no rank saw one.
  Value compute() override;
  std::string name() const override { return "InceptionScore"; }

 private:
  int64_t num_features_;
  FeatureExtractor extractor_;
  at::Tensor probability_total_, kl_total_;  // float64 (num_features,) sums
  int64_t num_examples_ = 0;
};

}  // namespace metrics
}  // namespace kindling
