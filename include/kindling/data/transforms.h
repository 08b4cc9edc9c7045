#pragma once
/// \file
/// Image transforms for kindling::data::TransformedDataset, after torchvision.transforms.
/// Each is a small copyable object whose operator() maps one sample's [..., C, H, W] tensor
/// (images as the datasets store them: channels first) to a new tensor, so it converts to
/// kindling::data::Transform. Transforms never modify their input in place (it is usually a
/// view of the dataset's memory); they may return their input or a view of it unchanged.
///
/// Random transforms draw from kindling::data::sample_rng() only, so the DataLoader's
/// per-sample seeding makes them reproducible.
///
/// Errors: constructors and operator() throw kindling::UsageError for bad arguments or an
/// unsuitable image (undefined, too few dimensions, wrong dtype, too small); the message
/// names the transform. Transforms are local and never communicate.

#include <ATen/ATen.h>

#include <array>
#include <cstdint>
#include <vector>

#include "kindling/data/dataset.h"
#include "kindling/export.h"
#include "kindling/options.h"

namespace kindling {
namespace data {
namespace transforms {

/// uint8 [C, H, W] in [0, 255] -> float32 [C, H, W] in [0, 1] (divided by 255), like
/// torchvision's ToTensor (whose input is HWC; here the storage is already CHW).
/// Floating-point input is returned unchanged; other types are an error.
class KINDLING_API ToTensor {
 public:
  /// Throws kindling::UsageError for an undefined tensor or a dtype other than uint8 or
  /// floating point.
  at::Tensor operator()(const at::Tensor& image) const;
};

/// (x - mean[c]) / stddev[c] for each channel c of a floating-point [..., C, H, W] tensor,
/// like torchvision's Normalize (mean and stddev are converted to the input's type first).
/// `mean` and `stddev` have C values each, or one value for all channels; no stddev may be 0.
class KINDLING_API Normalize {
 public:
  /// Throws kindling::UsageError when mean is empty, mean and stddev differ in length, or a
  /// stddev is 0 (as float32).
  Normalize(std::vector<double> mean, std::vector<double> stddev);
  /// Throws kindling::UsageError for an undefined image, fewer than 3 dimensions, a
  /// non-floating-point dtype, or (with more than one mean value) another channel count.
  at::Tensor operator()(const at::Tensor& image) const;

  const std::vector<double>& mean() const { return mean_; }
  const std::vector<double>& stddev() const { return stddev_; }

 private:
  std::vector<double> mean_;
  std::vector<double> stddev_;
  at::Tensor mean_tensor_;  // float32 [C, 1, 1]
  at::Tensor stddev_tensor_;
};

/// How Pad and RandomCrop fill the border (torchvision's padding_mode):
/// kConstant: the value `fill`; kEdge: the last value at the edge repeated;
/// kReflect: reflected without repeating the edge value ([1 2 3] padded by 2 -> 3 2 [1 2 3] 2 1;
/// the padding must be smaller than the image); kSymmetric: reflected with the edge value
/// ([1 2 3] padded by 2 -> 2 1 [1 2 3] 3 2; the padding must not exceed the image).
enum class PaddingMode { kConstant, kEdge, kReflect, kSymmetric };

/// Pads the last two dimensions (H, W) of an image, like torchvision's Pad.
class KINDLING_API Pad {
 public:
  /// `padding` on all four sides. Throws kindling::UsageError for a negative padding.
  explicit Pad(int64_t padding, double fill = 0, PaddingMode mode = PaddingMode::kConstant);
  /// torchvision's sequence forms: {all sides}, {left/right, top/bottom} or
  /// {left, top, right, bottom}. Each value must be non-negative. Throws
  /// kindling::UsageError for another number of values or a negative one.
  explicit Pad(const std::vector<int64_t>& padding, double fill = 0, PaddingMode mode = PaddingMode::kConstant);
  /// Throws kindling::UsageError for an undefined image or one with fewer than 2 dimensions,
  /// a `fill` outside [0, 255] on a uint8 image (constant mode), or a padding the mode
  /// cannot give (see PaddingMode; modes other than kConstant need a non-empty dimension).
  at::Tensor operator()(const at::Tensor& image) const;

  /// {left, top, right, bottom}.
  const std::array<int64_t, 4>& padding() const { return padding_; }

 private:
  std::array<int64_t, 4> padding_;
  double fill_;
  PaddingMode mode_;
};

/// Options of RandomCrop (chain the setters).
struct KINDLING_API RandomCropOptions {
  /// Pixels added on each side before cropping (default 0).
  KINDLING_ARG(int64_t, padding) = 0;

  /// Value of added pixels with PaddingMode::kConstant (default 0).
  KINDLING_ARG(double, fill) = 0;

  /// Pad an image still smaller than the crop (see RandomCrop) instead of failing.
  KINDLING_ARG(bool, pad_if_needed) = false;

  /// How added pixels are filled (default PaddingMode::kConstant, with fill).
  KINDLING_ARG(PaddingMode, mode) = PaddingMode::kConstant;
};

/// Pads the image by `padding` on each side, then cuts a size x size window at a uniformly
/// random position (top first, then left, each from std::uniform_int_distribution over
/// sample_rng()), like torchvision's RandomCrop. With `pad_if_needed`, an image still
/// smaller than `size` after that padding is padded further the way torchvision does (by
/// size - width on the left and on the right, by size - height on the top and the bottom);
/// without it a too small image is an error.
class KINDLING_API RandomCrop {
 public:
  /// Throws kindling::UsageError for a size that is not positive or a negative padding.
  explicit RandomCrop(int64_t size, const RandomCropOptions& options = RandomCropOptions());
  /// Throws kindling::UsageError for an image that is too small (see above), and for the
  /// cases Pad::operator() refuses.
  at::Tensor operator()(const at::Tensor& image) const;

 private:
  int64_t size_;
  int64_t padding_;
  double fill_;
  bool pad_if_needed_;
  PaddingMode mode_;
};

/// Reverses the last dimension (W) with probability `p`, drawing one uniform number from
/// sample_rng() per call (also when p is 0 or 1), like torchvision's RandomHorizontalFlip.
class KINDLING_API RandomHorizontalFlip {
 public:
  /// Throws kindling::UsageError for a p outside [0, 1].
  explicit RandomHorizontalFlip(double p = 0.5);
  /// Throws kindling::UsageError for an undefined image or a 0-dimensional one.
  at::Tensor operator()(const at::Tensor& image) const;

 private:
  double p_;
};

/// Applies `transforms` in order: Compose({a, b})(x) == b(a(x)).
class KINDLING_API Compose {
 public:
  /// Throws kindling::UsageError naming the position of an empty transform.
  explicit Compose(std::vector<Transform> transforms);
  /// Throws what the transforms throw; nothing of its own.
  at::Tensor operator()(const at::Tensor& image) const;

 private:
  std::vector<Transform> transforms_;
};

}  // namespace transforms
}  // namespace data
}  // namespace kindling
