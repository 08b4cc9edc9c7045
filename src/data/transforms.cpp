// Image transforms after torchvision.transforms; see include/kindling/data/transforms.h.
#include "kindling/data/transforms.h"

#include <algorithm>
#include <random>
#include <utility>

#include "kindling/error.h"

namespace kindling {
namespace data {
namespace transforms {
namespace {

void check_image(const at::Tensor& image, int64_t min_dim, const char* who, const char* layout) {
  KINDLING_CHECK(image.defined(), who, ": the image tensor is undefined");
  KINDLING_CHECK(image.dim() >= min_dim, who, ": expects an image ", layout, ", got a tensor of shape ", image.sizes());
}

const char* mode_name(PaddingMode mode) {
  switch (mode) {
    case PaddingMode::kConstant: return "constant";
    case PaddingMode::kEdge: return "edge";
    case PaddingMode::kReflect: return "reflect";
    case PaddingMode::kSymmetric: return "symmetric";
  }
  return "?";
}

// The source index of each position of a dimension of size n padded by `before` and `after`
// in a mode other than kConstant.
at::Tensor border_indices(int64_t n, int64_t before, int64_t after, PaddingMode mode, const char* who,
                          const char* dim_name) {
  const int64_t limit = mode == PaddingMode::kReflect ? n - 1 : n;
  KINDLING_CHECK(n > 0 && (mode == PaddingMode::kEdge || (before <= limit && after <= limit)), who, ": cannot pad the ",
                 dim_name, " of ", n, " by ", before, " and ", after, " in ", mode_name(mode),
                 " mode; the padding must be ", mode == PaddingMode::kReflect ? "smaller than" : "at most",
                 " the image's ", dim_name, mode == PaddingMode::kEdge ? " (which must not be 0)" : "");
  std::vector<int64_t> index;
  index.reserve(static_cast<std::size_t>(before + n + after));
  for (int64_t i = -before; i < n + after; ++i) {
    int64_t source = i;
    if (i < 0) {
      source = mode == PaddingMode::kEdge ? 0 : mode == PaddingMode::kReflect ? -i : -i - 1;
    } else if (i >= n) {
      source = mode == PaddingMode::kEdge ? n - 1 : mode == PaddingMode::kReflect ? 2 * (n - 1) - i : 2 * n - 1 - i;
    }
    index.push_back(source);
  }
  return at::tensor(index, at::TensorOptions().dtype(at::kLong));
}

// Pads dims -2 (H) and -1 (W) of `image` by padding = {left, top, right, bottom}.
at::Tensor pad_image(const at::Tensor& image, const std::array<int64_t, 4>& padding, double fill, PaddingMode mode,
                     const char* who) {
  check_image(image, 2, who, "[..., H, W]");
  const int64_t left = padding[0], top = padding[1], right = padding[2], bottom = padding[3];
  if (left == 0 && top == 0 && right == 0 && bottom == 0) return image;
  if (mode == PaddingMode::kConstant) {
    if (image.scalar_type() == at::kByte) {
      KINDLING_CHECK(fill >= 0 && fill <= 255, who, ": fill ", fill,
                     " does not fit a uint8 image; use a value in [0, 255] (or pad after ToTensor())");
    }
    // constant_pad_nd takes the pads from the last dimension backwards.
    return at::constant_pad_nd(image, {left, right, top, bottom}, fill);
  }
  at::Tensor padded = image;
  if (top != 0 || bottom != 0) {
    padded = padded.index_select(-2, border_indices(image.size(-2), top, bottom, mode, who, "height"));
  }
  if (left != 0 || right != 0) {
    padded = padded.index_select(-1, border_indices(image.size(-1), left, right, mode, who, "width"));
  }
  return padded;
}

}  // namespace

// ---- ToTensor ----

at::Tensor ToTensor::operator()(const at::Tensor& image) const {
  constexpr const char* who = "kindling::data::transforms::ToTensor";
  KINDLING_CHECK(image.defined(), who, ": the image tensor is undefined");
  if (image.is_floating_point()) return image;
  KINDLING_CHECK(image.scalar_type() == at::kByte, who,
                 ": expects a uint8 image (values 0-255) or a floating-point one, got ", image.scalar_type());
  return image.to(at::kFloat).div_(255.0);
}

// ---- Normalize ----

Normalize::Normalize(std::vector<double> mean, std::vector<double> stddev)
    : mean_(std::move(mean)), stddev_(std::move(stddev)) {
  constexpr const char* who = "kindling::data::transforms::Normalize";
  KINDLING_CHECK(!mean_.empty() && mean_.size() == stddev_.size(), who,
                 ": mean and stddev must have the same number of values (one per channel, or one for all), got ",
                 mean_.size(), " and ", stddev_.size());
  for (std::size_t c = 0; c < stddev_.size(); ++c) {
    KINDLING_CHECK(static_cast<float>(stddev_[c]) != 0.0f, who, ": stddev[", c, "] is ", stddev_[c],
                   "; dividing by it would give inf or nan");
  }
  const auto channels = static_cast<int64_t>(mean_.size());
  const auto as_double = at::TensorOptions().dtype(at::kDouble);
  mean_tensor_ = at::tensor(mean_, as_double).to(at::kFloat).view({channels, 1, 1});
  stddev_tensor_ = at::tensor(stddev_, as_double).to(at::kFloat).view({channels, 1, 1});
}

at::Tensor Normalize::operator()(const at::Tensor& image) const {
  constexpr const char* who = "kindling::data::transforms::Normalize";
  check_image(image, 3, who, "[..., C, H, W]");
  KINDLING_CHECK(image.is_floating_point(), who, ": expects a floating-point image, got ", image.scalar_type(),
                 "; put ToTensor() before Normalize");
  const int64_t channels = image.size(-3);
  KINDLING_CHECK(mean_.size() == 1 || static_cast<int64_t>(mean_.size()) == channels, who, ": the image has ", channels,
                 " channels (shape ", image.sizes(), ") but mean and stddev have ", mean_.size(), " values");
  if (image.scalar_type() == at::kFloat) return image.sub(mean_tensor_).div(stddev_tensor_);
  // Like torchvision: mean and stddev in the image's type.
  const auto options = at::TensorOptions().dtype(at::kDouble);
  const auto channels_shape = mean_tensor_.sizes();
  return image.sub(at::tensor(mean_, options).to(image.scalar_type()).view(channels_shape))
      .div(at::tensor(stddev_, options).to(image.scalar_type()).view(channels_shape));
}

// ---- Pad ----

Pad::Pad(int64_t padding, double fill, PaddingMode mode) : Pad(std::vector<int64_t>{padding}, fill, mode) {}

Pad::Pad(const std::vector<int64_t>& padding, double fill, PaddingMode mode) : fill_(fill), mode_(mode) {
  constexpr const char* who = "kindling::data::transforms::Pad";
  KINDLING_CHECK(padding.size() == 1 || padding.size() == 2 || padding.size() == 4, who,
                 ": padding must have 1 value (all sides), 2 (left/right, top/bottom) or 4 (left, top, right, bottom), "
                 "got ",
                 padding.size());
  for (int64_t p : padding) {
    KINDLING_CHECK(p >= 0, who, ": padding must not be negative, got ", p);
  }
  if (padding.size() == 1) {
    padding_ = {padding[0], padding[0], padding[0], padding[0]};
  } else if (padding.size() == 2) {
    padding_ = {padding[0], padding[1], padding[0], padding[1]};
  } else {
    padding_ = {padding[0], padding[1], padding[2], padding[3]};
  }
}

at::Tensor Pad::operator()(const at::Tensor& image) const {
  return pad_image(image, padding_, fill_, mode_, "kindling::data::transforms::Pad");
}

// ---- RandomCrop ----

RandomCrop::RandomCrop(int64_t size, const RandomCropOptions& options)
    : size_(size),
      padding_(options.padding()),
      fill_(options.fill()),
      pad_if_needed_(options.pad_if_needed()),
      mode_(options.mode()) {
  constexpr const char* who = "kindling::data::transforms::RandomCrop";
  KINDLING_CHECK(size_ > 0, who, ": size must be positive, got ", size_);
  KINDLING_CHECK(padding_ >= 0, who, ": padding must not be negative, got ", padding_);
}

at::Tensor RandomCrop::operator()(const at::Tensor& image) const {
  constexpr const char* who = "kindling::data::transforms::RandomCrop";
  check_image(image, 2, who, "[..., H, W]");
  at::Tensor padded = pad_image(image, {padding_, padding_, padding_, padding_}, fill_, mode_, who);
  if (pad_if_needed_) {
    // As torchvision: the missing width on the left and on the right, then the same for the height.
    const int64_t w = padded.size(-1);
    if (w < size_) padded = pad_image(padded, {size_ - w, 0, size_ - w, 0}, fill_, mode_, who);
    const int64_t h = padded.size(-2);
    if (h < size_) padded = pad_image(padded, {0, size_ - h, 0, size_ - h}, fill_, mode_, who);
  }
  const int64_t h = padded.size(-2);
  const int64_t w = padded.size(-1);
  KINDLING_CHECK(h >= size_ && w >= size_, who, ": the image is ", h, "x", w, padding_ > 0 ? " after padding" : "",
                 " (shape ", image.sizes(), "), smaller than the crop size ", size_, "x", size_,
                 "; pass pad_if_needed = true or a larger padding");
  std::mt19937_64& rng = sample_rng();
  const int64_t top = std::uniform_int_distribution<int64_t>(0, h - size_)(rng);
  const int64_t left = std::uniform_int_distribution<int64_t>(0, w - size_)(rng);
  return padded.narrow(-2, top, size_).narrow(-1, left, size_);
}

// ---- RandomHorizontalFlip ----

RandomHorizontalFlip::RandomHorizontalFlip(double p) : p_(p) {
  KINDLING_CHECK(p_ >= 0 && p_ <= 1, "kindling::data::transforms::RandomHorizontalFlip: p must be in [0, 1], got ", p_);
}

at::Tensor RandomHorizontalFlip::operator()(const at::Tensor& image) const {
  check_image(image, 1, "kindling::data::transforms::RandomHorizontalFlip", "[..., W]");
  // A uniform double in [0, 1) from the top 53 bits: u < 1 always, so p = 1 always flips.
  const double u = static_cast<double>(sample_rng()() >> 11) * 0x1.0p-53;
  return u < p_ ? image.flip({-1}) : image;
}

// ---- Compose ----

Compose::Compose(std::vector<Transform> transforms) : transforms_(std::move(transforms)) {
  for (std::size_t i = 0; i < transforms_.size(); ++i) {
    KINDLING_CHECK(static_cast<bool>(transforms_[i]), "kindling::data::transforms::Compose: transform ", i,
                   " is empty");
  }
}

at::Tensor Compose::operator()(const at::Tensor& image) const {
  at::Tensor x = image;
  for (const Transform& transform : transforms_) x = transform(x);
  return x;
}

}  // namespace transforms
}  // namespace data
}  // namespace kindling
