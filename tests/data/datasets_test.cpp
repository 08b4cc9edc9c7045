// kindling::data's datasets (MNIST / Fashion-MNIST IDX files, gzip or not; CIFAR-10 binary
// files) on small files written here and on the real Fashion-MNIST when installed, and the
// transforms (values, shapes, randomness drawn from sample_rng(), error messages).
#include <gtest/gtest.h>
#include <kindling/data/dataset.h>
#include <kindling/data/datasets.h>
#include <kindling/data/transforms.h>
#include <kindling/error.h>
#include <ftw.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace {

using kindling::data::CIFAR10;
using kindling::data::FashionMNIST;
using kindling::data::MNIST;
using kindling::data::Transform;
namespace tf = kindling::data::transforms;

using Bytes = std::vector<uint8_t>;

// Files through POSIX calls, not std::filesystem: pip's LibTorch 2.x exports its own copy of
// libstdc++'s std::filesystem functions, and a test binary's calls bind to it
// (std::filesystem::remove_all crashed there).
bool exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

uint64_t file_size(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) throw std::runtime_error("cannot stat " + path);
  return static_cast<uint64_t>(st.st_size);
}

std::string parent_of(const std::string& path) {
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? std::string(".") : path.substr(0, slash);
}

void make_directories(const std::string& dir) {
  for (std::size_t pos = 1; pos <= dir.size(); ++pos) {
    if (pos == dir.size() || dir[pos] == '/') ::mkdir(dir.substr(0, pos).c_str(), 0755);  // EEXIST is fine
  }
}

void remove_tree(const std::string& dir) {
  ::nftw(
      dir.c_str(), [](const char* p, const struct stat*, int, struct FTW*) { return ::remove(p); }, 16,
      FTW_DEPTH | FTW_PHYS);
}

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/kindling-datasets-XXXXXX";
    const char* made = ::mkdtemp(tmpl);
    if (made == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = made;
  }
  ~TempDir() { remove_tree(path_); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }
  std::string str() const { return path_; }

 private:
  std::string path_;
};

void write_file(const std::string& path, const Bytes& bytes) {
  make_directories(parent_of(path));
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

void write_gz(const std::string& path, const Bytes& bytes) {
  make_directories(parent_of(path));
  gzFile file = gzopen(path.c_str(), "wb");
  ASSERT_NE(file, nullptr) << path;
  if (!bytes.empty()) {
    ASSERT_EQ(gzwrite(file, bytes.data(), static_cast<unsigned>(bytes.size())), static_cast<int>(bytes.size()));
  }
  ASSERT_EQ(gzclose(file), Z_OK);
}

// The kindling::Error (or subclass E) `f` throws, or a test failure when it throws none.
template <typename E = kindling::Error, typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  ADD_FAILURE() << "no exception of the expected type was thrown";
  return "";
}

void expect_contains(const std::string& text, std::initializer_list<std::string> parts) {
  for (const std::string& part : parts) {
    EXPECT_NE(text.find(part), std::string::npos) << "\"" << part << "\" is not in: " << text;
  }
}

// ---- CIFAR-10 ----

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

// ---- IDX / MNIST ----

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

// ---- transforms ----

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
