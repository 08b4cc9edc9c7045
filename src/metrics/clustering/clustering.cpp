// SilhouetteScore, CalinskiHarabaszScore, DaviesBouldinScore and their functions
// (kindling/metrics/clustering.h): scikit-learn's definitions in float64 over the gathered
// samples. Written here because ignite calls scikit-learn, which a C++ program does not have.
#include "kindling/metrics/clustering.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <limits>
#include <string>
#include <tuple>
#include <utility>

namespace kindling {
namespace metrics {
namespace {

constexpr int64_t kRowsPerBlock = 1024;  // the silhouette's distance rows held at once

// The features as (N, D) float64 and the labels as cluster codes 0..K-1 with each cluster's size.
struct Clusters {
  at::Tensor x, codes, sizes;  // (N, D) double, (N,) long, (K,) double
  int64_t count = 0;           // K
};

// Features (N, D) floating point ((N,) is a (N, 1) that EpochMetric squeezed), labels (N,) integers.
void check_pair(const std::string& who, const at::Tensor& features, const at::Tensor& labels) {
  KINDLING_CHECK((features.dim() == 1 || features.dim() == 2) && at::isFloatingType(features.scalar_type()),
                 "kindling::metrics::", who, ": features must be floating point of shape (N, D), but given ",
                 features.scalar_type(), " ", features.sizes());
  KINDLING_CHECK(labels.dim() == 1 && !at::isFloatingType(labels.scalar_type()) && labels.scalar_type() != at::kBool,
                 "kindling::metrics::", who, ": labels must be integers of shape (N,), but given ",
                 labels.scalar_type(), " ", labels.sizes());
  KINDLING_CHECK(features.size(0) == labels.size(0), "kindling::metrics::", who,
                 ": features and labels must have as many rows, but given ", features.sizes(), " and ", labels.sizes());
}

Clusters clusters_of(const char* what, const at::Tensor& features, const at::Tensor& labels) {
  check_pair(what, features, labels);
  const at::Tensor x = features.dim() == 1 ? features.unsqueeze(1) : features;
  Clusters c;
  c.x = x.to(at::kDouble).cpu();
  const at::Tensor not_finite = at::isfinite(c.x).all(1).logical_not().nonzero();
  KINDLING_CHECK(not_finite.numel() == 0, "kindling::metrics::", what, ": features must be finite, but row ",
                 not_finite[0][0].item<int64_t>(), " of ", c.x.size(0),
                 " holds NaN or inf (scikit-learn, which ignite's clustering metrics call, refuses them too); leave "
                 "such rows out with an output transform");
  at::Tensor unique, counts;
  std::tie(unique, c.codes, counts) = at::_unique2(labels.cpu(), /*sorted=*/true, /*return_inverse=*/true,
                                                   /*return_counts=*/true);
  c.sizes = counts.to(at::kDouble);
  c.count = unique.numel();
  return c;
}

// ignite's rule: a score needs at least 2 clusters and fewer clusters than samples.
bool scorable(const Clusters& c) { return c.count >= 2 && c.count < c.x.size(0); }

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Each cluster's centroid, (K, D).
at::Tensor centroids_of(const Clusters& c) {
  return at::zeros({c.count, c.x.size(1)}, c.x.options()).index_add_(0, c.codes, c.x) / c.sizes.unsqueeze(1);
}

}  // namespace

double silhouette_score(const at::Tensor& features, const at::Tensor& labels) {
  const Clusters c = clusters_of("silhouette_score", features, labels);
  if (!scorable(c)) return kNaN;
  const int64_t n = c.x.size(0);
  const at::Tensor one_hot = at::one_hot(c.codes, c.count).to(at::kDouble);  // (N, K)
  double sum = 0;
  for (int64_t start = 0; start < n; start += kRowsPerBlock) {
    const int64_t end = std::min(n, start + kRowsPerBlock);
    const at::Tensor own = c.codes.slice(0, start, end).unsqueeze(1);
    const at::Tensor to_clusters = at::cdist(c.x.slice(0, start, end), c.x).mm(one_hot);  // distance sums
    const at::Tensor own_size = c.sizes.index({own.squeeze(1)});
    const at::Tensor a = to_clusters.gather(1, own).squeeze(1) / (own_size - 1);
    const at::Tensor b =
        std::get<0>((to_clusters / c.sizes).scatter(1, own, std::numeric_limits<double>::infinity()).min(1));
    at::Tensor s = (b - a) / at::maximum(a, b);
    s = at::where(at::isnan(s) | (own_size == 1), at::zeros_like(s), s);  // alone in its cluster: 0
    sum += s.sum().item<double>();
  }
  return sum / static_cast<double>(n);
}

double calinski_harabasz_score(const at::Tensor& features, const at::Tensor& labels) {
  const Clusters c = clusters_of("calinski_harabasz_score", features, labels);
  if (!scorable(c)) return kNaN;
  const at::Tensor centroids = centroids_of(c);
  const double between = (c.sizes * (centroids - c.x.mean(0)).pow(2).sum(1)).sum().item<double>();
  const double within = (c.x - centroids.index({c.codes})).pow(2).sum().item<double>();
  if (within == 0) return 1.0;
  const double n = static_cast<double>(c.x.size(0)), k = static_cast<double>(c.count);
  return between * (n - k) / (within * (k - 1));
}

double davies_bouldin_score(const at::Tensor& features, const at::Tensor& labels) {
  const Clusters c = clusters_of("davies_bouldin_score", features, labels);
  if (!scorable(c)) return kNaN;
  const at::Tensor centroids = centroids_of(c);
  const at::Tensor spread =
      at::zeros({c.count}, c.x.options()).index_add_(0, c.codes, (c.x - centroids.index({c.codes})).norm(2, {1})) /
      c.sizes;
  at::Tensor between = at::cdist(centroids, centroids);
  // scikit-learn's "all close to 0" (absolute tolerance 1e-8): a degenerate clustering scores 0.
  if ((spread.abs() <= 1e-8).all().item<bool>() || (between.abs() <= 1e-8).all().item<bool>()) return 0.0;
  between = at::where(between == 0, at::full_like(between, std::numeric_limits<double>::infinity()), between);
  const at::Tensor ratios = (spread.unsqueeze(1) + spread.unsqueeze(0)) / between;
  return std::get<0>(ratios.max(1)).mean().item<double>();
}

ClusteringMetric::ClusteringMetric(double (*score)(const at::Tensor&, const at::Tensor&),
                                   OutputTransform output_transform, bool check_compute_fn, c10::Device device)
    : EpochMetric([score](const at::Tensor& x, const at::Tensor& y) { return Value(score(x, y)); },
                  std::move(output_transform), check_compute_fn, device) {}

void ClusteringMetric::check_input(const at::Tensor& features, const at::Tensor& labels) const {
  check_pair(name(), features, labels);
}

SilhouetteScore::SilhouetteScore(OutputTransform output_transform, bool check_compute_fn, c10::Device device)
    : ClusteringMetric(silhouette_score, std::move(output_transform), check_compute_fn, device) {}

CalinskiHarabaszScore::CalinskiHarabaszScore(OutputTransform output_transform, bool check_compute_fn,
                                             c10::Device device)
    : ClusteringMetric(calinski_harabasz_score, std::move(output_transform), check_compute_fn, device) {}

DaviesBouldinScore::DaviesBouldinScore(OutputTransform output_transform, bool check_compute_fn, c10::Device device)
    : ClusteringMetric(davies_bouldin_score, std::move(output_transform), check_compute_fn, device) {}

}  // namespace metrics
}  // namespace kindling
