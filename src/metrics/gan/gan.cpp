// FID and InceptionScore (ignite.metrics.gan): sums of features, their outer products and
// their log-probabilities, reduced across ranks, then ignite's formulas.
#include "kindling/metrics/gan.h"

#include <ATen/ATen.h>

#include <string>

#include "kindling/error.h"
#include "metrics/shape_text.h"

namespace kindling {
namespace metrics {
namespace {

// The extractor's (N, num_features) output for `inputs`, in float64 on `device`, checked.
at::Tensor features_of(const std::string& who, const FeatureExtractor& extractor, const at::Tensor& inputs,
                       int64_t num_features, c10::Device device) {
  at::Tensor out;
  {
    at::NoGradGuard no_grad;
    out = extractor ? extractor(inputs.detach()) : inputs.detach();
  }
  KINDLING_CHECK(out.defined() && out.dim() == 2, "kindling::metrics::", who,
                 ": the features must have 2 dimensions (N, num_features), got ",
                 out.defined() ? shape_text(out) : "an undefined tensor",
                 "; give a feature_extractor that maps a batch to (N, num_features)");
  KINDLING_CHECK(out.size(0) > 0, "kindling::metrics::", who, ": a batch needs at least one sample, got 0");
  KINDLING_CHECK(out.size(1) == num_features, "kindling::metrics::", who, ": num_features is ", num_features,
                 " but the features have ", out.size(1), " columns (", shape_text(out), ")");
  return out.to(device, at::kDouble);
}

// (S - t t^T / n) / (n - 1): the unbiased covariance from the sums of x and of x x^T.
at::Tensor covariance(const at::Tensor& sigma, const at::Tensor& total, int64_t n) {
  return (sigma - at::outer(total, total) / static_cast<double>(n)) / static_cast<double>(n - 1);
}

// tr((a b)^(1/2)) for symmetric positive semi-definite a and b: the sum of the square roots of
// the eigenvalues of a^(1/2) b a^(1/2) (similar to a b, and symmetric).
double trace_sqrt_product(const at::Tensor& a, const at::Tensor& b) {
  const auto [values, vectors] = at::linalg_eigh(a);
  const at::Tensor root = vectors.mm(at::diag(values.clamp_min(0).sqrt())).mm(vectors.t());
  at::Tensor m = root.mm(b).mm(root);
  m = (m + m.t()) / 2;
  return at::linalg_eigvalsh(m).clamp_min(0).sqrt().sum().item<double>();
}

void check_num_features(const char* who, int64_t num_features) {
  KINDLING_CHECK(num_features >= 1, "kindling::metrics::", who, ": num_features must be at least 1, got ", num_features,
                 " (the extractor's feature count)");
}

}  // namespace

FID::FID(int64_t num_features, FeatureExtractor feature_extractor, OutputTransform output_transform, c10::Device device)
    : Metric(std::move(output_transform), device),
      num_features_(num_features),
      extractor_(std::move(feature_extractor)) {
  check_num_features("FID", num_features);
  register_state("_train_total", &real_total_, Reshard::kSum);
  register_state("_train_sigma", &real_sigma_, Reshard::kSum);
  register_state("_test_total", &fake_total_, Reshard::kSum);
  register_state("_test_sigma", &fake_sigma_, Reshard::kSum);
  register_state("_num_examples", &num_examples_, Reshard::kSum);
  FID::reset();
}

void FID::reset() {
  const auto options = at::TensorOptions().dtype(at::kDouble).device(device());
  real_total_ = at::zeros({num_features_}, options);
  fake_total_ = at::zeros({num_features_}, options);
  real_sigma_ = at::zeros({num_features_, num_features_}, options);
  fake_sigma_ = at::zeros({num_features_, num_features_}, options);
  num_examples_ = 0;
}

void FID::update(const Value& output) {
  const auto [real_inputs, fake_inputs] = y_pred_and_y(output);
  const at::Tensor real = features_of(name(), extractor_, real_inputs, num_features_, device());
  const at::Tensor fake = features_of(name(), extractor_, fake_inputs, num_features_, device());
  KINDLING_CHECK(real.sizes() == fake.sizes(),
                 "kindling::metrics::FID: the real and generated batches give features of ", shape_text(real), " and ",
                 shape_text(fake), "; give batches of the same size");
  real_total_ += real.sum(0);
  real_sigma_ += real.t().mm(real);
  fake_total_ += fake.sum(0);
  fake_sigma_ += fake.t().mm(fake);
  num_examples_ += real.size(0);
}

Value FID::compute() {
  const at::Tensor real_total = reduce(real_total_), fake_total = reduce(fake_total_);
  const at::Tensor real_sigma = reduce(real_sigma_), fake_sigma = reduce(fake_sigma_);
  const int64_t n = reduce(num_examples_);
  if (n < 2) {
    throw NotComputableError(detail::rank_prefix() +
                             "kindling::metrics::FID needs at least 2 samples (a covariance), got " +
                             std::to_string(n));
  }
  const bool finite = at::isfinite(real_total).all().item<bool>() && at::isfinite(fake_total).all().item<bool>() &&
                      at::isfinite(real_sigma).all().item<bool>() && at::isfinite(fake_sigma).all().item<bool>();
  KINDLING_CHECK(finite,
                 "kindling::metrics::FID: the features hold NaN or inf (their sums over every rank are not finite); "
                 "ignite's FID refuses them too (scipy's sqrtm: 'array must not contain infs or NaNs'). Leave such "
                 "samples out, or look at the feature extractor");
  const at::Tensor s1 = covariance(real_sigma, real_total, n), s2 = covariance(fake_sigma, fake_total, n);
  const at::Tensor diff = (real_total - fake_total) / static_cast<double>(n);
  const double fid = diff.dot(diff).item<double>() + s1.trace().item<double>() + s2.trace().item<double>() -
                     2 * trace_sqrt_product(s1, s2);
  return Value(fid);
}

InceptionScore::InceptionScore(int64_t num_features, FeatureExtractor feature_extractor,
                               OutputTransform output_transform, c10::Device device)
    : Metric(std::move(output_transform), device),
      num_features_(num_features),
      extractor_(std::move(feature_extractor)) {
  check_num_features("InceptionScore", num_features);
  register_state("_prob_total", &probability_total_, Reshard::kSum);
  register_state("_total_kl_d", &kl_total_, Reshard::kSum);
  register_state("_num_examples", &num_examples_, Reshard::kSum);
  InceptionScore::reset();
}

void InceptionScore::reset() {
  const auto options = at::TensorOptions().dtype(at::kDouble).device(device());
  probability_total_ = at::zeros({num_features_}, options);
  kl_total_ = at::zeros({num_features_}, options);
  num_examples_ = 0;
}

void InceptionScore::update(const Value& output) {
  const at::Tensor inputs = output.is_tensor() ? output.tensor() : y_pred_and_y(output).first;
  const at::Tensor p = features_of(name(), extractor_, inputs, num_features_, device());
  probability_total_ += p.sum(0);
  kl_total_ += (p * at::log(p + 1e-16)).sum(0);
  num_examples_ += p.size(0);
}

Value InceptionScore::compute() {
  const at::Tensor total = reduce(probability_total_), kl = reduce(kl_total_);
  const int64_t n = reduce(num_examples_);
  if (n == 0) {
    throw NotComputableError(
        detail::rank_prefix() +
        "kindling::metrics::InceptionScore must have at least one example before it can be computed");
  }
  const at::Tensor log_mean = at::log(total / static_cast<double>(n) + 1e-16);
  return Value(at::exp((kl - total * log_mean).sum() / static_cast<double>(n)).item<double>());
}

}  // namespace metrics
}  // namespace kindling
