// kindling::data's transforms: values, shapes, randomness drawn from sample_rng(), error
// messages.
#include <gtest/gtest.h>
#include <kindling/data/dataset.h>
#include <kindling/data/transforms.h>
#include <kindling/error.h>

#include <cstdint>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "data/test_helpers.h"

namespace {

using kindling::data::Transform;
namespace tf = kindling::data::transforms;
using kindling::testing::error_of;
using kindling::testing::expect_contains;

at::Tensor bytes_tensor(std::vector<int64_t> sizes, const std::vector<uint8_t>& values) {
  return at::tensor(std::vector<int64_t>(values.begin(), values.end()), at::TensorOptions().dtype(at::kLong))
      .to(at::kByte)
      .view(sizes);
}

at::Tensor floats_tensor(std::vector<int64_t> sizes, const std::vector<float>& values) {
  return at::tensor(values, at::TensorOptions().dtype(at::kFloat)).view(sizes);
}

TEST(Transforms, ToTensor) {
  const at::Tensor image = bytes_tensor({1, 2, 2}, {0, 51, 255, 128});
  const at::Tensor out = tf::ToTensor()(image);
  EXPECT_EQ(out.scalar_type(), at::kFloat);
  EXPECT_EQ(out.sizes(), image.sizes());
  EXPECT_FLOAT_EQ(out[0][0][0].item<float>(), 0.0f);
  EXPECT_FLOAT_EQ(out[0][0][1].item<float>(), 0.2f);
  EXPECT_FLOAT_EQ(out[0][1][0].item<float>(), 1.0f);
  EXPECT_FLOAT_EQ(out[0][1][1].item<float>(), 128.0f / 255.0f);
  EXPECT_EQ(image[0][1][0].item<int64_t>(), 255);  // input unchanged

  const at::Tensor floats = floats_tensor({1, 1, 2}, {0.5f, 2.0f});
  EXPECT_TRUE(tf::ToTensor()(floats).is_same(floats));
  expect_contains(error_of<kindling::UsageError>([] {
                    tf::ToTensor()(at::zeros({1, 2, 2}, at::kInt));
                  }),
                  {"ToTensor", "uint8", "Int"});
}

TEST(Transforms, Normalize) {
  const at::Tensor image = floats_tensor({2, 1, 2}, {1, 2, 3, 4});
  const at::Tensor out = tf::Normalize({1, 2}, {2, 4})(image);
  EXPECT_TRUE(at::allclose(out, floats_tensor({2, 1, 2}, {0, 0.5f, 0.25f, 0.5f})));
  EXPECT_TRUE(at::equal(image, floats_tensor({2, 1, 2}, {1, 2, 3, 4})));  // input unchanged
  // One value for all channels; a batch of images; float64 input.
  EXPECT_TRUE(at::allclose(tf::Normalize({1}, {2})(image), floats_tensor({2, 1, 2}, {0, 0.5f, 1, 1.5f})));
  EXPECT_EQ(tf::Normalize({1, 2}, {2, 4})(image.unsqueeze(0).expand({3, 2, 1, 2})).sizes(),
            (std::vector<int64_t>{3, 2, 1, 2}));
  const at::Tensor doubles = tf::Normalize({0.1, 0.2}, {0.3, 0.7})(image.to(at::kDouble));
  EXPECT_EQ(doubles.scalar_type(), at::kDouble);
  EXPECT_DOUBLE_EQ(doubles[1][0][1].item<double>(), (4 - 0.2) / 0.7);
  // Fashion-MNIST's statistics on a ToTensor'd pixel.
  EXPECT_NEAR(tf::Normalize({0.2860}, {0.3530})(floats_tensor({1, 1, 1}, {1.0f})).item<float>(),
              (1.0 - 0.2860) / 0.3530, 1e-5);

  expect_contains(error_of<kindling::UsageError>([&] {
                    tf::Normalize({1, 2, 3}, {1, 1, 1})(image);
                  }),
                  {"Normalize", "the image has 2 channels", "3 values"});
  expect_contains(error_of<kindling::UsageError>([] { tf::Normalize({1, 2}, {1, 0}); }), {"stddev[1] is 0"});
  expect_contains(error_of<kindling::UsageError>([] { tf::Normalize({1, 2}, {1}); }), {"same number", "2 and 1"});
  expect_contains(error_of<kindling::UsageError>([] {
                    tf::Normalize({0.5}, {0.5})(at::zeros({1, 2, 2}, at::kByte));
                  }),
                  {"floating-point", "ToTensor() before Normalize"});
  expect_contains(error_of<kindling::UsageError>([] {
                    tf::Normalize({0.5}, {0.5})(at::zeros({2, 2}));
                  }),
                  {"[..., C, H, W]", "[2, 2]"});
}

TEST(Transforms, Pad) {
  const at::Tensor image = bytes_tensor({1, 2, 3}, {1, 2, 3, 4, 5, 6});
  const at::Tensor out = tf::Pad(1, 9)(image);
  ASSERT_EQ(out.sizes(), (std::vector<int64_t>{1, 4, 5}));
  EXPECT_EQ(out.scalar_type(), at::kByte);
  EXPECT_TRUE(at::equal(out.narrow(1, 1, 2).narrow(2, 1, 3), image));
  EXPECT_EQ(out.eq(9).sum().item<int64_t>(), 4 * 5 - 6);
  EXPECT_EQ(out[0][0][0].item<int64_t>(), 9);
  EXPECT_EQ(out[0][3][4].item<int64_t>(), 9);

  // {left, top, right, bottom}.
  const at::Tensor four = tf::Pad({1, 2, 3, 4}, 7)(image);
  ASSERT_EQ(four.sizes(), (std::vector<int64_t>{1, 2 + 2 + 4, 1 + 3 + 3}));
  EXPECT_TRUE(at::equal(four.narrow(1, 2, 2).narrow(2, 1, 3), image));
  EXPECT_EQ(four.eq(7).sum().item<int64_t>(), 8 * 7 - 6);
  // {left/right, top/bottom}; float input and a fractional fill.
  const at::Tensor two = tf::Pad({1, 2}, 0.5)(image.to(at::kFloat));
  ASSERT_EQ(two.sizes(), (std::vector<int64_t>{1, 6, 5}));
  EXPECT_TRUE(at::equal(two.narrow(1, 2, 2).narrow(2, 1, 3), image.to(at::kFloat)));
  EXPECT_EQ(two.eq(0.5).sum().item<int64_t>(), 6 * 5 - 6);
  EXPECT_TRUE(tf::Pad(0)(image).is_same(image));

  // The other modes on the row [1 2 3], padded by 2 on the left and on the right.
  const at::Tensor row = bytes_tensor({1, 1, 3}, {1, 2, 3});
  EXPECT_TRUE(
      at::equal(tf::Pad({2, 0}, 0, tf::PaddingMode::kEdge)(row), bytes_tensor({1, 1, 7}, {1, 1, 1, 2, 3, 3, 3})));
  EXPECT_TRUE(
      at::equal(tf::Pad({2, 0}, 0, tf::PaddingMode::kReflect)(row), bytes_tensor({1, 1, 7}, {3, 2, 1, 2, 3, 2, 1})));
  EXPECT_TRUE(
      at::equal(tf::Pad({2, 0}, 0, tf::PaddingMode::kSymmetric)(row), bytes_tensor({1, 1, 7}, {2, 1, 1, 2, 3, 3, 2})));
  // Edge in both dimensions: corners repeat the corner value.
  const at::Tensor edge = tf::Pad(1, 0, tf::PaddingMode::kEdge)(image);
  EXPECT_TRUE(at::equal(edge[0][0], bytes_tensor({5}, {1, 1, 2, 3, 3})));
  EXPECT_TRUE(at::equal(edge[0][3], bytes_tensor({5}, {4, 4, 5, 6, 6})));

  expect_contains(error_of<kindling::UsageError>([] { tf::Pad(-1); }), {"must not be negative", "-1"});
  expect_contains(error_of<kindling::UsageError>([] { tf::Pad(std::vector<int64_t>{1, 2, 3}); }), {"got 3"});
  expect_contains(error_of<kindling::UsageError>([&] { tf::Pad(3, 0, tf::PaddingMode::kReflect)(row); }),
                  {"reflect mode", "smaller than"});
  expect_contains(error_of<kindling::UsageError>([&] { tf::Pad(1, 300)(image); }), {"fill 300", "uint8"});
}

// The (top, left) of the window of `padded` that equals `crop`, or {-1, -1}.
std::pair<int64_t, int64_t> find_window(const at::Tensor& padded, const at::Tensor& crop) {
  const int64_t size = crop.size(-1);
  for (int64_t top = 0; top + size <= padded.size(-2); ++top) {
    for (int64_t left = 0; left + size <= padded.size(-1); ++left) {
      if (at::equal(padded.narrow(-2, top, size).narrow(-1, left, size), crop)) return {top, left};
    }
  }
  return {-1, -1};
}

// [3, 8, 8] with all values distinct and non-zero, so every window of its zero-padded
// version is different.
at::Tensor distinct_image() { return (at::arange(192, at::kLong) + 1).to(at::kByte).view({3, 8, 8}); }

TEST(Transforms, RandomCrop) {
  const at::Tensor image = distinct_image();
  const at::Tensor padded = tf::Pad(2)(image);
  const tf::RandomCrop crop(6, tf::RandomCropOptions().padding(2));

  kindling::data::seed_sample_rng(42, 0, 7);
  const at::Tensor out = crop(image);
  ASSERT_EQ(out.sizes(), (std::vector<int64_t>{3, 6, 6}));
  EXPECT_EQ(out.scalar_type(), at::kByte);
  const auto offset = find_window(padded, out);
  EXPECT_GE(offset.first, 0) << "the crop is not a window of the padded image";

  // The same seed gives the same crop; many seeds give many offsets, all in range.
  kindling::data::seed_sample_rng(42, 0, 7);
  EXPECT_TRUE(at::equal(crop(image), out));
  std::set<std::pair<int64_t, int64_t>> offsets;
  for (int64_t index = 0; index < 60; ++index) {
    kindling::data::seed_sample_rng(3, 1, index);
    const auto where = find_window(padded, crop(image));
    ASSERT_GE(where.first, 0);
    ASSERT_LE(where.first, 6);
    ASSERT_LE(where.second, 6);
    offsets.insert(where);
  }
  EXPECT_GT(offsets.size(), 5u);

  // Without padding: a window of the image itself; a crop of the full size is the image.
  EXPECT_GE(find_window(image, tf::RandomCrop(5)(image)).first, 0);
  EXPECT_TRUE(at::equal(tf::RandomCrop(8)(image), image));

  // Too small: an error, or pad_if_needed (torchvision pads by size - width on both sides).
  expect_contains(error_of<kindling::UsageError>([&] { tf::RandomCrop(10)(image); }),
                  {"RandomCrop", "8x8", "smaller than the crop size 10x10", "pad_if_needed"});
  const at::Tensor grown = tf::RandomCrop(10, tf::RandomCropOptions().pad_if_needed(true))(image);
  ASSERT_EQ(grown.sizes(), (std::vector<int64_t>{3, 10, 10}));
  EXPECT_GE(find_window(tf::Pad(2)(image), grown).first, 0);
  expect_contains(error_of<kindling::UsageError>([] { tf::RandomCrop(0); }), {"size must be positive"});
}

TEST(Transforms, RandomHorizontalFlip) {
  const at::Tensor image = bytes_tensor({1, 2, 3}, {1, 2, 3, 4, 5, 6});
  const at::Tensor flipped = bytes_tensor({1, 2, 3}, {3, 2, 1, 6, 5, 4});
  int flips = 0;
  for (int64_t index = 0; index < 100; ++index) {
    kindling::data::seed_sample_rng(5, 0, index);
    const at::Tensor half = tf::RandomHorizontalFlip()(image);
    EXPECT_TRUE(at::equal(tf::RandomHorizontalFlip(0)(image), image));
    EXPECT_TRUE(at::equal(tf::RandomHorizontalFlip(1)(image), flipped));
    if (at::equal(half, flipped)) {
      ++flips;
    } else {
      EXPECT_TRUE(at::equal(half, image));
    }
    kindling::data::seed_sample_rng(5, 0, index);
    EXPECT_TRUE(at::equal(tf::RandomHorizontalFlip()(image), half)) << "not reproducible for index " << index;
  }
  EXPECT_GT(flips, 20);
  EXPECT_LT(flips, 80);
  expect_contains(error_of<kindling::UsageError>([] { tf::RandomHorizontalFlip(1.5); }),
                  {"p must be in [0, 1]", "1.5"});
}

TEST(Transforms, Compose) {
  const Transform add_one = [](const at::Tensor& x) { return x + 1; };
  const Transform twice = [](const at::Tensor& x) { return x * 2; };
  const at::Tensor one = at::ones({1}, at::kFloat);
  EXPECT_EQ(tf::Compose({add_one, twice})(one).item<float>(), 4.0f);
  EXPECT_EQ(tf::Compose({twice, add_one})(one).item<float>(), 3.0f);
  EXPECT_TRUE(tf::Compose({})(one).is_same(one));

  // A typical pipeline, usable as a Transform.
  const Transform pipeline = tf::Compose({tf::Pad(1, 0), tf::ToTensor(), tf::Normalize({0.5}, {0.5})});
  const at::Tensor out = pipeline(bytes_tensor({1, 1, 1}, {255}));
  ASSERT_EQ(out.sizes(), (std::vector<int64_t>{1, 3, 3}));
  EXPECT_FLOAT_EQ(out[0][1][1].item<float>(), 1.0f);
  EXPECT_FLOAT_EQ(out[0][0][0].item<float>(), -1.0f);

  expect_contains(error_of<kindling::UsageError>([&] {
                    tf::Compose({add_one, Transform()});
                  }),
                  {"transform 1 is empty"});
}

}  // namespace
