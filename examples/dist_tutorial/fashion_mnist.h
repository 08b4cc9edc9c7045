#pragma once
/// \file
/// Fashion-MNIST straight from its gzip IDX files (no gunzip step), and the tutorial's
/// DataPartitioner: a seeded shuffle of the sample indices cut into equal parts.

#include <ATen/ATen.h>
#include <zlib.h>

#include <kindling/error.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

namespace dist_tutorial {

/// Mean and standard deviation of the Fashion-MNIST training pixels (scaled to [0, 1]).
constexpr double kFashionMnistMean = 0.2860;
constexpr double kFashionMnistStd = 0.3530;

/// One split: images [n, 1, 28, 28] float32, normalized; labels [n] int64 in [0, 9].
struct FashionMnist {
  at::Tensor images;
  at::Tensor labels;
  int64_t size() const { return labels.size(0); }
};

namespace detail {

struct GzCloser {
  void operator()(gzFile file) const { gzclose(file); }
};
using GzFile = std::unique_ptr<std::remove_pointer_t<gzFile>, GzCloser>;

inline GzFile open_gz(const std::string& path) {
  GzFile file(gzopen(path.c_str(), "rb"));
  const int error = errno;
  KINDLING_CHECK_T(kindling::Error, file != nullptr, "dist_tutorial: cannot open the Fashion-MNIST file ", path, " (",
                   std::strerror(error), ")",
                   error == ENOENT ? "; install the Debian package dataset-fashion-mnist "
                                     "(apt-get install dataset-fashion-mnist) or pass --data-dir DIR with the "
                                     "four *-ubyte.gz files"
                                   : "");
  gzbuffer(file.get(), 1 << 20);
  return file;
}

/// Reads exactly `bytes` bytes, in pieces gzread can express; throws on a short file.
inline void read_exact(gzFile file, void* data, std::size_t bytes, const std::string& path) {
  auto* out = static_cast<unsigned char*>(data);
  while (bytes > 0) {
    const unsigned piece = static_cast<unsigned>(std::min<std::size_t>(bytes, 1u << 30));
    const int got = gzread(file, out, piece);
    if (got < 0) {
      int code = 0;
      KINDLING_CHECK_T(kindling::Error, false, "dist_tutorial: cannot decompress ", path, ": ", gzerror(file, &code));
    }
    KINDLING_CHECK_T(kindling::Error, got > 0, "dist_tutorial: ", path, " is truncated (", bytes,
                     " more bytes expected); reinstall dataset-fashion-mnist");
    out += got;
    bytes -= static_cast<std::size_t>(got);
  }
}

/// IDX headers are big-endian 32-bit integers.
inline uint32_t read_u32(gzFile file, const std::string& path) {
  unsigned char b[4];
  read_exact(file, b, sizeof b, path);
  return (uint32_t{b[0]} << 24) | (uint32_t{b[1]} << 16) | (uint32_t{b[2]} << 8) | uint32_t{b[3]};
}

inline std::string hex32(uint32_t value) {
  char text[16];
  std::snprintf(text, sizeof text, "0x%08x", static_cast<unsigned>(value));
  return text;
}

inline void check_magic(uint32_t seen, uint32_t expected, const std::string& path) {
  KINDLING_CHECK_T(kindling::Error, seen == expected, "dist_tutorial: ", path,
                   " is not an IDX file of the expected kind: magic number ", hex32(seen), " instead of ",
                   hex32(expected), "; check --data-dir");
}

}  // namespace detail

/// Loads the split `prefix` ("train" or "t10k") from `dir`/<prefix>-{images-idx3,labels-idx1}-ubyte.gz,
/// keeping only the first `limit` samples when limit >= 0. Pixels are scaled to [0, 1]
/// and normalized with kFashionMnistMean / kFashionMnistStd. Throws kindling::Error naming
/// the file for a missing file, a wrong magic number, mismatched counts or a short file.
inline FashionMnist load_fashion_mnist(const std::string& dir, const std::string& prefix, int64_t limit = -1) {
  const std::string images_path = dir + "/" + prefix + "-images-idx3-ubyte.gz";
  const std::string labels_path = dir + "/" + prefix + "-labels-idx1-ubyte.gz";
  detail::GzFile images_file = detail::open_gz(images_path);
  detail::GzFile labels_file = detail::open_gz(labels_path);

  detail::check_magic(detail::read_u32(images_file.get(), images_path), 0x00000803u, images_path);
  const int64_t count = detail::read_u32(images_file.get(), images_path);
  const int64_t rows = detail::read_u32(images_file.get(), images_path);
  const int64_t cols = detail::read_u32(images_file.get(), images_path);
  KINDLING_CHECK_T(kindling::Error, rows == 28 && cols == 28, "dist_tutorial: ", images_path, " holds ", rows, "x",
                   cols, " images; expected 28x28");
  detail::check_magic(detail::read_u32(labels_file.get(), labels_path), 0x00000801u, labels_path);
  const int64_t label_count = detail::read_u32(labels_file.get(), labels_path);
  KINDLING_CHECK_T(kindling::Error, label_count == count, "dist_tutorial: ", images_path, " holds ", count,
                   " images but ", labels_path, " holds ", label_count, " labels; the files do not belong together");

  const int64_t n = limit >= 0 ? std::min(limit, count) : count;
  std::vector<uint8_t> pixels(static_cast<std::size_t>(n * rows * cols));
  std::vector<uint8_t> labels(static_cast<std::size_t>(n));
  detail::read_exact(images_file.get(), pixels.data(), pixels.size(), images_path);
  detail::read_exact(labels_file.get(), labels.data(), labels.size(), labels_path);

  FashionMnist split;
  // from_blob wraps the vectors without copying; .to() makes the owned copies.
  split.images = at::from_blob(pixels.data(), {n, 1, rows, cols}, at::TensorOptions().dtype(at::kByte))
                     .to(at::kFloat)
                     .div_(255.0)
                     .sub_(kFashionMnistMean)
                     .div_(kFashionMnistStd);
  split.labels = at::from_blob(labels.data(), {n}, at::TensorOptions().dtype(at::kByte)).to(at::kLong);
  const auto bad = std::count_if(labels.begin(), labels.end(), [](uint8_t l) { return l > 9; });
  KINDLING_CHECK_T(kindling::Error, bad == 0, "dist_tutorial: ", labels_path, " has ", bad,
                   " labels outside [0, 9]; the file is damaged");
  return split;
}

/// The tutorial's DataPartitioner for equal fractions: shuffles 0..n-1 with std::mt19937
/// seeded with `seed` (the same on every rank, so the parts are disjoint) and returns the
/// `part`-th of `parts` consecutive slices of n / parts indices (the remainder is dropped,
/// so every rank gets the same number of samples and runs the same number of steps).
inline std::vector<int64_t> partition_indices(int64_t n, int parts, int part, uint32_t seed = 1234) {
  std::vector<int64_t> order(static_cast<std::size_t>(n));
  std::iota(order.begin(), order.end(), int64_t{0});
  std::mt19937 rng(seed);
  std::shuffle(order.begin(), order.end(), rng);
  const int64_t length = n / parts;
  return std::vector<int64_t>(order.begin() + part * length, order.begin() + (part + 1) * length);
}

}  // namespace dist_tutorial
