// SSIM (kindling/metrics/ssim.h): windowed means, variances and covariance by a grouped
// convolution over reflected borders, as ignite computes them.
#include "kindling/metrics/ssim.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <utility>

namespace kindling {
namespace metrics {
namespace {

// One dimension's window: Gaussian of `sigma` normalized to 1, or ignite's uniform one (1/5 on
// the middle five taps).
at::Tensor window(int64_t size, double sigma, bool gaussian) {
  const auto options = at::TensorOptions().dtype(at::kDouble);
  if (!gaussian) {
    at::Tensor w = at::zeros({size}, options);
    w.slice(0, std::max<int64_t>(size / 2 - 2, 0), std::min<int64_t>(size / 2 + 3, size)).fill_(1.0 / 5.0);
    return w;
  }
  const double half = static_cast<double>(size - 1) * 0.5;
  const at::Tensor g = at::exp(-0.5 * (at::linspace(-half, half, size, options) / sigma).pow(2));
  return g / g.sum();
}

// A per-dimension argument given once or once per dimension, as ndims values.
template <typename T>
std::vector<T> per_dimension(const char* what, std::vector<T> given, int64_t ndims) {
  if (given.size() == 1) given.assign(static_cast<std::size_t>(ndims), given.front());
  KINDLING_CHECK(static_cast<int64_t>(given.size()) == ndims, "kindling::metrics::SSIM: ", what,
                 " must hold one value or ", ndims, " (one per spatial dimension), got ", given.size());
  return given;
}

}  // namespace

SSIM::SSIM(double data_range, std::vector<int64_t> kernel_size, std::vector<double> sigma, double k1, double k2,
           bool gaussian, OutputTransform output_transform, c10::Device device, int64_t ndims)
    : SampleMean("_sum_of_ssim", std::move(output_transform), device), ndims_(ndims) {
  KINDLING_CHECK(ndims == 2 || ndims == 3, "kindling::metrics::SSIM: ndims must be 2 or 3, got ", ndims);
  KINDLING_CHECK(data_range > 0 && std::isfinite(data_range),
                 "kindling::metrics::SSIM: data_range must be a positive number (1 for values in [0, 1], 255 for "
                 "bytes), got ",
                 data_range);
  kernel_size_ = per_dimension("kernel_size", std::move(kernel_size), ndims);
  sigma = per_dimension("sigma", std::move(sigma), ndims);
  for (int64_t d = 0; d < ndims; ++d) {
    const auto i = static_cast<std::size_t>(d);
    KINDLING_CHECK(kernel_size_[i] > 0 && kernel_size_[i] % 2 == 1,
                   "kindling::metrics::SSIM: kernel sizes must be odd and positive, got ", kernel_size_[i]);
    KINDLING_CHECK(sigma[i] > 0, "kindling::metrics::SSIM: sigmas must be positive, got ", sigma[i]);
  }
  kernel_ = at::outer(window(kernel_size_[0], sigma[0], gaussian), window(kernel_size_[1], sigma[1], gaussian));
  if (ndims == 3) kernel_ = kernel_.unsqueeze(2) * window(kernel_size_[2], sigma[2], gaussian);
  c1_ = std::pow(k1 * data_range, 2);
  c2_ = std::pow(k2 * data_range, 2);
}

at::Tensor SSIM::per_sample(const at::Tensor& y_pred_in, const at::Tensor& y_in) const {
  KINDLING_CHECK(y_pred_in.scalar_type() == y_in.scalar_type(),
                 "kindling::metrics::SSIM: y_pred and y must have the "
                 "same dtype, but given ",
                 y_pred_in.scalar_type(), " and ", y_in.scalar_type());
  KINDLING_CHECK(y_pred_in.sizes() == y_in.sizes() && y_in.dim() == ndims_ + 2,
                 "kindling::metrics::SSIM: y_pred and y "
                 "must have the same shape, ",
                 ndims_ == 2 ? "(N, C, H, W)" : "(N, C, D, H, W)", ", but given ", y_pred_in.sizes(), " and ",
                 y_in.sizes());
  const auto type = at::isFloatingType(y_in.scalar_type()) ? y_in.scalar_type() : at::kFloat;
  // ignite's padding: the last dimension by kernel_size[1], the one before by kernel_size[0]
  // (and the first spatial one by kernel_size[2] for 3-D).
  std::vector<int64_t> pad{(kernel_size_[1] - 1) / 2, (kernel_size_[1] - 1) / 2, (kernel_size_[0] - 1) / 2,
                           (kernel_size_[0] - 1) / 2};
  if (ndims_ == 3) pad.insert(pad.end(), {(kernel_size_[2] - 1) / 2, (kernel_size_[2] - 1) / 2});
  for (int64_t d = 0; d < ndims_; ++d) {
    KINDLING_CHECK(y_in.size(y_in.dim() - 1 - d) > pad[static_cast<std::size_t>(2 * d)],
                   "kindling::metrics::SSIM: "
                   "the images ",
                   y_in.sizes(), " are too small for the window ", c10::IntArrayRef(kernel_size_),
                   " (reflected borders "
                   "need each size above half the window)");
  }
  const auto padded = [&](const at::Tensor& t) {
    const at::Tensor x = t.to(type);
    return ndims_ == 2 ? at::reflection_pad2d(x, pad) : at::reflection_pad3d(x, pad);
  };
  const at::Tensor p = padded(y_pred_in), t = padded(y_in);
  const int64_t channels = y_in.size(1), n = y_in.size(0);
  std::vector<int64_t> kernel_shape{channels, 1};
  for (int64_t s : kernel_.sizes()) kernel_shape.push_back(s);
  const at::Tensor kernel = kernel_.to(p.options()).expand(kernel_shape);
  const at::Tensor all = at::cat({p, t, p * p, t * t, p * t});
  const std::vector<int64_t> ones(static_cast<std::size_t>(ndims_), 1), zeros(static_cast<std::size_t>(ndims_), 0);
  const c10::optional<at::Tensor> no_bias;
  const at::Tensor out = ndims_ == 2 ? at::conv2d(all, kernel, no_bias, ones, zeros, ones, channels)
                                     : at::conv3d(all, kernel, no_bias, ones, zeros, ones, channels);
  const auto part = [&](int64_t k) { return out.slice(0, k * n, (k + 1) * n); };
  const at::Tensor mu_p2 = part(0).pow(2), mu_t2 = part(1).pow(2), mu_pt = part(0) * part(1);
  const at::Tensor a1 = 2 * mu_pt + c1_, a2 = 2 * (part(4) - mu_pt) + c2_;
  const at::Tensor b1 = mu_p2 + mu_t2 + c1_, b2 = (part(2) - mu_p2) + (part(3) - mu_t2) + c2_;
  const at::Tensor index = (a1 * a2) / (b1 * b2);
  std::vector<int64_t> dims;
  for (int64_t d = 1; d < index.dim(); ++d) dims.push_back(d);
  return index.to(at::kDouble).mean(dims);
}

}  // namespace metrics
}  // namespace kindling
