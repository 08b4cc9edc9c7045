// kindling::data's MNIST / Fashion-MNIST IDX files (gzip or not) on small files written here,
// read_idx_file, and the real Fashion-MNIST when installed.
#include <gtest/gtest.h>
#include <kindling/data/dataset.h>
#include <kindling/data/datasets.h>
#include <kindling/error.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "data/test_helpers.h"

namespace {

using kindling::data::FashionMNIST;
using kindling::data::MNIST;
using kindling::testing::Bytes;
using kindling::testing::error_of;
using kindling::testing::exists;
using kindling::testing::expect_contains;
using kindling::testing::file_size;
using kindling::testing::TempDir;
using kindling::testing::write_file;
using kindling::testing::write_gz;

void put_u32(Bytes& bytes, uint32_t value) {
  for (int shift = 24; shift >= 0; shift -= 8) bytes.push_back(static_cast<uint8_t>(value >> shift));
}

Bytes idx_bytes(uint32_t magic, const std::vector<uint32_t>& dims, const Bytes& data) {
  Bytes bytes;
  put_u32(bytes, magic);
  for (uint32_t d : dims) put_u32(bytes, d);
  bytes.insert(bytes.end(), data.begin(), data.end());
  return bytes;
}

Bytes mnist_pixels(int n, int salt) {
  Bytes pixels;
  for (int i = 0; i < n * 784; ++i) pixels.push_back(static_cast<uint8_t>((i * 7 + salt) % 256));
  return pixels;
}

Bytes mnist_images(int n, int salt) {
  return idx_bytes(0x803, {static_cast<uint32_t>(n), 28, 28}, mnist_pixels(n, salt));
}

Bytes mnist_labels(const Bytes& labels) { return idx_bytes(0x801, {static_cast<uint32_t>(labels.size())}, labels); }

// train-* gzip-compressed (3 samples), t10k-* uncompressed (2 samples).
void write_mnist(const std::string& dir) {
  write_gz(dir + "/train-images-idx3-ubyte.gz", mnist_images(3, 1));
  write_gz(dir + "/train-labels-idx1-ubyte.gz", mnist_labels({3, 0, 9}));
  write_file(dir + "/t10k-images-idx3-ubyte", mnist_images(2, 5));
  write_file(dir + "/t10k-labels-idx1-ubyte", mnist_labels({7, 1}));
}

at::Tensor expected_mnist_images(int n, int salt) {
  Bytes pixels = mnist_pixels(n, salt);
  return at::from_blob(pixels.data(), {n, 1, 28, 28}, at::TensorOptions().dtype(at::kByte)).clone();
}

TEST(MNIST, ReadsGzipAndUncompressedFiles) {
  TempDir tmp;
  const std::string dir = tmp / "mnist";
  write_mnist(dir);

  MNIST train(dir, true);
  ASSERT_EQ(train.size(), 3);
  EXPECT_EQ(train.name(), "MNIST(train, 3)");
  EXPECT_EQ(train.images().sizes(), (std::vector<int64_t>{3, 1, 28, 28}));
  EXPECT_EQ(train.images().scalar_type(), at::kByte);
  EXPECT_EQ(train.targets().scalar_type(), at::kLong);
  EXPECT_TRUE(at::equal(train.images(), expected_mnist_images(3, 1)));
  const std::vector<int64_t> labels = {3, 0, 9};
  for (int64_t i = 0; i < 3; ++i) {
    const kindling::data::Example e = train.get(i);
    EXPECT_EQ(e.data.sizes(), (std::vector<int64_t>{1, 28, 28}));
    EXPECT_EQ(e.data.scalar_type(), at::kByte);
    EXPECT_EQ(e.target.dim(), 0);
    EXPECT_EQ(e.target.scalar_type(), at::kLong);
    EXPECT_EQ(e.target.item<int64_t>(), labels[static_cast<std::size_t>(i)]);
    EXPECT_TRUE(at::equal(e.data, expected_mnist_images(3, 1)[i]));
  }
  // Pixel (row 2, column 5) of image 1 is byte 784 + 2 * 28 + 5 of the data.
  EXPECT_EQ(train.get(1).data[0][2][5].item<int64_t>(), ((784 + 2 * 28 + 5) * 7 + 1) % 256);
  EXPECT_THROW(train.get(3), kindling::UsageError);

  MNIST test(dir, false);
  ASSERT_EQ(test.size(), 2);
  EXPECT_FALSE(test.train());
  EXPECT_EQ(test.name(), "MNIST(test, 2)");
  EXPECT_TRUE(at::equal(test.images(), expected_mnist_images(2, 5)));
  EXPECT_EQ(test.targets()[0].item<int64_t>(), 7);
  EXPECT_EQ(test.targets()[1].item<int64_t>(), 1);

  // A directory named after Fashion-MNIST gives its name.
  const std::string fashion = tmp / "my-fashion-mnist";
  write_mnist(fashion);
  EXPECT_EQ(FashionMNIST(fashion, false).name(), "FashionMNIST(test, 2)");
}

TEST(MNIST, ReadIdxFileTypes) {
  TempDir tmp;
  // int32 [2, 3], big-endian in the file.
  Bytes data;
  const std::vector<int32_t> ints = {1, -2, 300000, -400000, 0, 2147483647};
  for (int32_t v : ints) put_u32(data, static_cast<uint32_t>(v));
  write_gz(tmp / "ints.gz", idx_bytes(0x0C02, {2, 3}, data));
  const at::Tensor t = kindling::data::read_idx_file(tmp / "ints.gz");
  EXPECT_EQ(t.scalar_type(), at::kInt);
  ASSERT_EQ(t.sizes(), (std::vector<int64_t>{2, 3}));
  for (int i = 0; i < 6; ++i) EXPECT_EQ(t.view({6})[i].item<int64_t>(), ints[static_cast<std::size_t>(i)]);

  // float64 [2], uncompressed.
  data.clear();
  for (double v : {1.5, -0.25}) {
    uint64_t bits;
    std::memcpy(&bits, &v, sizeof bits);
    put_u32(data, static_cast<uint32_t>(bits >> 32));
    put_u32(data, static_cast<uint32_t>(bits));
  }
  write_file(tmp / "doubles", idx_bytes(0x0E01, {2}, data));
  const at::Tensor d = kindling::data::read_idx_file(tmp / "doubles");
  EXPECT_EQ(d.scalar_type(), at::kDouble);
  EXPECT_EQ(d[0].item<double>(), 1.5);
  EXPECT_EQ(d[1].item<double>(), -0.25);

  // int16 with a zero dimension: an empty tensor.
  write_file(tmp / "empty", idx_bytes(0x0B02, {0, 4}, {}));
  const at::Tensor empty = kindling::data::read_idx_file(tmp / "empty");
  EXPECT_EQ(empty.scalar_type(), at::kShort);
  EXPECT_EQ(empty.sizes(), (std::vector<int64_t>{0, 4}));

  // Not IDX files.
  write_file(tmp / "text", {'h', 'e', 'l', 'l', 'o', ' ', 'w', 'o', 'r', 'l', 'd'});
  expect_contains(error_of([&] { kindling::data::read_idx_file(tmp / "text"); }),
                  {tmp / "text", "is not an IDX file", "0x68656c6c"});
  write_file(tmp / "short", {0, 0});
  expect_contains(error_of([&] { kindling::data::read_idx_file(tmp / "short"); }), {tmp / "short", "too short"});
  write_file(tmp / "long", idx_bytes(0x0801, {2}, {1, 2, 3}));
  expect_contains(error_of([&] { kindling::data::read_idx_file(tmp / "long"); }),
                  {tmp / "long", "more data than its header announces"});
  expect_contains(error_of([&] { kindling::data::read_idx_file(tmp / "absent"); }),
                  {"cannot open", tmp / "absent", "No such file"});
}

TEST(MNIST, Errors) {
  TempDir tmp;
  expect_contains(error_of([&] { MNIST dataset(tmp / "nowhere"); }),
                  {tmp / "nowhere", "does not exist", "dataset-fashion-mnist", "/usr/share/datasets/fashion-mnist"});
  expect_contains(error_of([&] { MNIST dataset(tmp.str()); }),
                  {"cannot find", tmp / "train-images-idx3-ubyte.gz", "dataset-fashion-mnist"});

  // Images and labels swapped: the magic numbers say so.
  const std::string swapped = tmp / "swapped";
  write_file(swapped + "/train-images-idx3-ubyte", mnist_labels({1, 2}));
  write_file(swapped + "/train-labels-idx1-ubyte", mnist_images(2, 0));
  expect_contains(error_of([&] { MNIST dataset(swapped); }),
                  {swapped + "/train-labels-idx1-ubyte", "is not an MNIST labels file",
                   "magic number is 0x00000803 (2051) instead of 0x00000801 (2049)", "mixed up"});
  write_file(swapped + "/train-labels-idx1-ubyte", mnist_labels({1, 2}));
  expect_contains(error_of([&] { MNIST dataset(swapped); }),
                  {swapped + "/train-images-idx3-ubyte", "is not an MNIST images file",
                   "magic number is 0x00000801 (2049) instead of 0x00000803 (2051)"});

  // Counts that differ.
  const std::string counts = tmp / "counts";
  write_gz(counts + "/train-images-idx3-ubyte.gz", mnist_images(3, 0));
  write_gz(counts + "/train-labels-idx1-ubyte.gz", mnist_labels({1, 2}));
  expect_contains(error_of([&] { MNIST dataset(counts); }),
                  {"holds 3 images but", "holds 2 labels", "do not belong together"});

  // Images that are not 28x28.
  const std::string dims = tmp / "dims";
  write_file(dims + "/train-images-idx3-ubyte", idx_bytes(0x803, {1, 27, 28}, Bytes(27 * 28, 0)));
  write_file(dims + "/train-labels-idx1-ubyte", mnist_labels({1}));
  expect_contains(error_of([&] { MNIST dataset(dims); }), {dims + "/train-images-idx3-ubyte", "27x28", "28x28"});

  // Labels outside [0, 9].
  const std::string labels = tmp / "labels";
  write_file(labels + "/t10k-images-idx3-ubyte", mnist_images(2, 0));
  write_file(labels + "/t10k-labels-idx1-ubyte", mnist_labels({4, 12}));
  expect_contains(error_of([&] { MNIST dataset(labels, false); }), {"outside [0, 9]", "12 at index 1"});

  // A truncated file, uncompressed and compressed.
  const std::string truncated = tmp / "truncated";
  Bytes images = mnist_images(3, 0);
  images.resize(images.size() - 784);
  write_file(truncated + "/train-images-idx3-ubyte", images);
  write_file(truncated + "/train-labels-idx1-ubyte", mnist_labels({1, 2, 3}));
  expect_contains(
      error_of([&] { MNIST dataset(truncated); }),
      {truncated + "/train-images-idx3-ubyte", "is truncated", "3x28x28 uint8 values (2352 bytes)", "only 1568 bytes"});
  const std::string gz = tmp / "truncated-gz";
  write_gz(gz + "/train-images-idx3-ubyte.gz", mnist_images(3, 0));
  write_gz(gz + "/train-labels-idx1-ubyte.gz", mnist_labels({1, 2, 3}));
  const auto gz_size = file_size(gz + "/train-images-idx3-ubyte.gz");
  ASSERT_EQ(::truncate((gz + "/train-images-idx3-ubyte.gz").c_str(), static_cast<off_t>(gz_size / 2)), 0);
  const std::string message = error_of([&] { MNIST dataset(gz); });
  expect_contains(message, {gz + "/train-images-idx3-ubyte.gz"});
  EXPECT_TRUE(message.find("truncated") != std::string::npos || message.find("decompress") != std::string::npos)
      << message;
}

TEST(FashionMNIST, RealData) {
  const std::string root = kindling::data::kFashionMnistRoot;
  if (!exists(root + "/train-images-idx3-ubyte.gz") && !exists(root + "/train-images-idx3-ubyte")) {
    GTEST_SKIP() << "Fashion-MNIST is not installed in " << root << " (Debian package dataset-fashion-mnist)";
  }
  FashionMNIST train(root, true);
  ASSERT_EQ(train.size(), 60000);
  EXPECT_EQ(train.name(), "FashionMNIST(train, 60000)");
  FashionMNIST test(root, false);
  ASSERT_EQ(test.size(), 10000);
  EXPECT_EQ(test.name(), "FashionMNIST(test, 10000)");

  std::vector<int64_t> per_class(10, 0);
  const int64_t* labels = train.targets().data_ptr<int64_t>();
  for (int64_t i = 0; i < train.size(); ++i) {
    ASSERT_GE(labels[i], 0);
    ASSERT_LE(labels[i], 9);
    ++per_class[static_cast<std::size_t>(labels[i])];
  }
  for (int c = 0; c < 10; ++c) EXPECT_EQ(per_class[static_cast<std::size_t>(c)], 6000) << "class " << c;
  EXPECT_GE(test.targets().min().item<int64_t>(), 0);
  EXPECT_LE(test.targets().max().item<int64_t>(), 9);

  const double mean = static_cast<double>(train.images().sum(at::kLong).item<int64_t>()) /
                      static_cast<double>(train.images().numel()) / 255.0;
  EXPECT_NEAR(mean, 0.2860, 1e-3);
  EXPECT_TRUE(at::equal(train.get(12345).data, train.images()[12345]));
}

}  // namespace
