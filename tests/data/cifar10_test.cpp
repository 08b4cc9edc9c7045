// kindling::data::CIFAR10 on small binary files written here.
#include <gtest/gtest.h>
#include <kindling/data/dataset.h>
#include <kindling/data/datasets.h>
#include <kindling/data/transforms.h>
#include <kindling/error.h>

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/test_helpers.h"

namespace {

using kindling::data::CIFAR10;
namespace tf = kindling::data::transforms;
using kindling::testing::Bytes;
using kindling::testing::error_of;
using kindling::testing::expect_contains;
using kindling::testing::TempDir;
using kindling::testing::write_file;

// Byte values of record r of file f (0-4 data_batch_{f+1}.bin, 5 test_batch.bin).
uint8_t cifar_label(int f, int r) { return static_cast<uint8_t>((f * 3 + r) % 10); }
uint8_t cifar_pixel(int f, int r, int c, int p) {
  return static_cast<uint8_t>((f * 31 + r * 17 + c * 101 + p * 7) % 256);
}

Bytes cifar_file(int f, int records) {
  Bytes bytes;
  for (int r = 0; r < records; ++r) {
    bytes.push_back(cifar_label(f, r));
    for (int c = 0; c < 3; ++c) {
      for (int p = 0; p < 1024; ++p) bytes.push_back(cifar_pixel(f, r, c, p));
    }
  }
  return bytes;
}

const std::vector<int> kCifarRecords = {2, 3, 4, 5, 2, 3};  // data_batch_1..5, test_batch

std::string cifar_name(int f) { return f < 5 ? "data_batch_" + std::to_string(f + 1) + ".bin" : "test_batch.bin"; }

// Writes the six files into dir.
void write_cifar(const std::string& dir) {
  for (int f = 0; f < 6; ++f) write_file(dir + "/" + cifar_name(f), cifar_file(f, kCifarRecords[f]));
}

at::Tensor expected_cifar_image(int f, int r) {
  at::Tensor image = at::empty({3, 32, 32}, at::TensorOptions().dtype(at::kByte));
  uint8_t* data = image.data_ptr<uint8_t>();
  for (int c = 0; c < 3; ++c) {
    for (int p = 0; p < 1024; ++p) data[c * 1024 + p] = cifar_pixel(f, r, c, p);
  }
  return image;
}

TEST(CIFAR10, ReadsRecordsLabelsAndChannels) {
  TempDir tmp;
  const std::string bin = tmp / "cifar-10-batches-bin";
  write_cifar(bin);

  for (const std::string& root : {bin, tmp.str()}) {  // the directory itself, or its parent
    SCOPED_TRACE(root);
    CIFAR10 train(root, true);
    ASSERT_EQ(train.size(), 16);
    EXPECT_EQ(train.name(), "CIFAR10(train, 16)");
    EXPECT_TRUE(train.train());
    EXPECT_EQ(train.images().sizes(), (std::vector<int64_t>{16, 3, 32, 32}));
    EXPECT_EQ(train.targets().sizes(), (std::vector<int64_t>{16}));
    int64_t index = 0;
    for (int f = 0; f < 5; ++f) {
      for (int r = 0; r < kCifarRecords[f]; ++r, ++index) {
        const kindling::data::Example e = train.get(index);
        ASSERT_EQ(e.data.scalar_type(), at::kByte);
        ASSERT_EQ(e.data.sizes(), (std::vector<int64_t>{3, 32, 32}));
        ASSERT_EQ(e.target.scalar_type(), at::kLong);
        ASSERT_EQ(e.target.dim(), 0);
        EXPECT_EQ(e.target.item<int64_t>(), cifar_label(f, r)) << "file " << f << " record " << r;
        EXPECT_TRUE(at::equal(e.data, expected_cifar_image(f, r))) << "file " << f << " record " << r;
        EXPECT_EQ(train.targets()[index].item<int64_t>(), cifar_label(f, r));
      }
    }
    CIFAR10 test(root, false);
    ASSERT_EQ(test.size(), 3);
    EXPECT_EQ(test.name(), "CIFAR10(test, 3)");
    for (int r = 0; r < 3; ++r) {
      EXPECT_EQ(test.get(r).target.item<int64_t>(), cifar_label(5, r));
      EXPECT_TRUE(at::equal(test.get(r).data, expected_cifar_image(5, r)));
    }
  }

  // Channel order and layout against the raw bytes: record 1 of data_batch_2.bin (sample 3):
  // byte 1 + c * 1024 + y * 32 + x is channel c (R, G, B), row y, column x.
  const Bytes raw = cifar_file(1, kCifarRecords[1]);
  CIFAR10 train(bin);
  const at::Tensor image = train.get(3).data;
  const std::vector<std::array<int, 3>> positions = {{0, 0, 0}, {1, 2, 3}, {2, 31, 31}, {0, 31, 0}, {2, 0, 31}};
  for (const auto& [c, y, x] : positions) {
    EXPECT_EQ(image[c][y][x].item<int64_t>(), raw[3073 + 1 + c * 1024 + y * 32 + x]) << c << " " << y << " " << x;
  }
  EXPECT_EQ(train.get(3).target.item<int64_t>(), raw[3073]);

  EXPECT_THROW(train.get(16), kindling::UsageError);
  EXPECT_THROW(train.get(-1), kindling::UsageError);

  // With a transform.
  kindling::data::TransformedDataset transformed(std::make_shared<CIFAR10>(bin, false), tf::ToTensor());
  EXPECT_EQ(transformed.size(), 3);
  EXPECT_EQ(transformed.get(0).data.scalar_type(), at::kFloat);
  EXPECT_NEAR(transformed.get(0).data[2][31][31].item<double>(), cifar_pixel(5, 0, 2, 1023) / 255.0, 1e-6);
}

TEST(CIFAR10, Classes) {
  const auto& classes = CIFAR10::classes();
  ASSERT_EQ(classes.size(), 10u);
  EXPECT_EQ(classes[0], "airplane");
  EXPECT_EQ(classes[1], "automobile");
  EXPECT_EQ(classes[3], "cat");
  EXPECT_EQ(classes[9], "truck");
}

TEST(CIFAR10, Errors) {
  TempDir tmp;
  expect_contains(error_of([&] { CIFAR10 dataset(tmp / "nowhere"); }),
                  {tmp / "nowhere", "does not exist", "cifar-10-binary"});
  expect_contains(error_of([&] { CIFAR10 dataset(tmp.str()); }),
                  {"cannot find", tmp / "data_batch_1.bin", "cifar-10-batches-bin/data_batch_1.bin"});

  // A missing training file among the five.
  const std::string missing = tmp / "missing";
  write_cifar(missing);
  ::unlink((missing + "/data_batch_3.bin").c_str());
  expect_contains(error_of([&] { CIFAR10 dataset(missing, true); }), {"cannot find", "data_batch_3.bin"});
  EXPECT_EQ(CIFAR10(missing, false).size(), 3);

  // A label byte outside 0-9.
  const std::string bad_label = tmp / "bad_label";
  Bytes bytes = cifar_file(5, 3);
  bytes[3073] = 10;
  write_file(bad_label + "/test_batch.bin", bytes);
  expect_contains(error_of([&] { CIFAR10 dataset(bad_label, false); }),
                  {bad_label + "/test_batch.bin", "record 1 has label byte 10", "0-9"});

  // Truncated and empty files.
  const std::string truncated = tmp / "truncated";
  bytes = cifar_file(5, 2);
  bytes.resize(bytes.size() - 5);
  write_file(truncated + "/test_batch.bin", bytes);
  expect_contains(error_of([&] { CIFAR10 dataset(truncated, false); }),
                  {truncated + "/test_batch.bin", "6141 bytes", "not a multiple of the 3073-byte"});
  const std::string empty = tmp / "empty";
  write_file(empty + "/test_batch.bin", {});
  expect_contains(error_of([&] { CIFAR10 dataset(empty, false); }), {empty + "/test_batch.bin", "is empty"});
}

}  // namespace
