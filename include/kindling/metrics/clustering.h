#pragma once
/// \file
/// Cluster quality over every sample of the epoch (ignite.metrics.clustering, which calls
/// scikit-learn; written here in C++ with scikit-learn's definitions): SilhouetteScore,
/// CalinskiHarabaszScore and DaviesBouldinScore. Input: (features, labels), features of shape
/// (N, D) floating point, labels (N,) integers (any values: the cluster ids). Euclidean
/// distances, in float64. With fewer than 2 clusters, or as many clusters as samples, the
/// value is NaN (as ignite's).
///
/// \code
///   auto silhouette = std::make_shared<kindling::metrics::SilhouetteScore>();
///   silhouette->attach(evaluator, "silhouette");   // output: (embeddings, cluster ids)
/// \endcode
///
/// Ranks: as EpochMetric (epoch_metric.h): update() stores this rank's samples; compute()
/// gathers every rank's (ranks may hold different numbers, or none), computes on rank 0 and
/// broadcasts the value, a collective on every rank. Checkpointed with the samples and
/// resharded to another world size by concatenation.

#include <string>

#include "kindling/metrics/epoch_metric.h"

namespace kindling {
namespace metrics {

/// The mean silhouette coefficient (b - a) / max(a, b) of the samples: a the mean distance to
/// the other members of its cluster, b the least mean distance to another cluster's members;
/// 0 for a sample alone in its cluster. O(N^2) time, O(N) memory beyond the input (rows of
/// distances in blocks). Local. Throws kindling::UsageError for input of the wrong shape or type,
/// or features holding NaN or inf (naming the first such row; scikit-learn 1.9.1 raises
/// ValueError for them, so ignite's metrics do too).
KINDLING_API double silhouette_score(const at::Tensor& features, const at::Tensor& labels);
/// The ratio of between-cluster to within-cluster dispersion, each over its degrees of freedom
/// ((N - K) / (K - 1)); 1 when every cluster is a single point. Local; throws as above.
KINDLING_API double calinski_harabasz_score(const at::Tensor& features, const at::Tensor& labels);
/// The mean over clusters of the largest (s_i + s_j) / d(c_i, c_j), s the mean distance of a
/// cluster's members to its centroid c; 0 when every s or every d is 0. Local; throws as above.
KINDLING_API double davies_bouldin_score(const at::Tensor& features, const at::Tensor& labels);

/// What the three share: the input checks (features (N, D) floating point, labels (N,)
/// integers) on top of EpochMetric.
class KINDLING_API ClusteringMetric : public EpochMetric {
 public:
  /// A collective on every rank. Throws NotComputableError when no rank stored a sample,
  /// kindling::UsageError on every rank when a stored feature is NaN or inf (as the functions).
  Value compute() override { return EpochMetric::compute(); }

 protected:
  ClusteringMetric(double (*score)(const at::Tensor&, const at::Tensor&), OutputTransform output_transform,
                   bool check_compute_fn, c10::Device device);
  /// Throws kindling::UsageError naming the metric for features that are not (N, D) floating
  /// point (or (N,), one feature), labels that are not (N,) integers, or different row counts.
  void check_input(const at::Tensor& features, const at::Tensor& labels) const override;
};

/// silhouette_score over every rank's samples (scikit-learn's, Euclidean).
class KINDLING_API SilhouetteScore : public ClusteringMetric {
 public:
  explicit SilhouetteScore(OutputTransform output_transform = {}, bool check_compute_fn = true,
                           c10::Device device = c10::Device(c10::kCPU));
  std::string name() const override { return "SilhouetteScore"; }
};

/// calinski_harabasz_score over every rank's samples.
class KINDLING_API CalinskiHarabaszScore : public ClusteringMetric {
 public:
  explicit CalinskiHarabaszScore(OutputTransform output_transform = {}, bool check_compute_fn = true,
                                 c10::Device device = c10::Device(c10::kCPU));
  std::string name() const override { return "CalinskiHarabaszScore"; }
};

/// davies_bouldin_score over every rank's samples.
class KINDLING_API DaviesBouldinScore : public ClusteringMetric {
 public:
  explicit DaviesBouldinScore(OutputTransform output_transform = {}, bool check_compute_fn = true,
                              c10::Device device = c10::Device(c10::kCPU));
  std::string name() const override { return "DaviesBouldinScore"; }
};

}  // namespace metrics
}  // namespace kindling
