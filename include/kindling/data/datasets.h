#pragma once
/// \file
/// Ready-made datasets: MNIST / Fashion-MNIST from their IDX files (gzip-compressed or not)
/// and CIFAR-10 from its binary version. Each loads its whole split into memory in the
/// constructor; get() then returns views of that memory, so it is cheap and safe to call
/// from several threads at once.
///
/// The samples are uint8 [C, H, W] tensors, as stored in the files; put
/// transforms::ToTensor() (and transforms::Normalize) in a TransformedDataset to get
/// float32 inputs. get()'s data is a view of the dataset's storage: transforms must not
/// modify it in place (kindling's transforms never do).
///
/// Errors: the constructors throw kindling::Error for file problems (the message names the
/// file); get() throws kindling::UsageError for an index outside [0, size()). Getters are
/// local and do not throw. Nothing here communicates: each rank loads its own copy.

#include <ATen/ATen.h>

#include <cstdint>
#include <string>
#include <vector>

#include "kindling/data/dataset.h"
#include "kindling/export.h"

namespace kindling {
namespace data {

/// Where Debian's package dataset-fashion-mnist installs the four Fashion-MNIST files.
inline constexpr const char* kFashionMnistRoot = "/usr/share/datasets/fashion-mnist";

/// Reads an IDX file (the format of MNIST and Fashion-MNIST), gzip-compressed or not: the
/// result has the file's dimensions and element type (uint8, int8, int16, int32, float32 or
/// float64; multi-byte values are converted from the file's big-endian order). Throws
/// kindling::Error naming the file when it is missing or cannot be opened, is not an IDX
/// file, is truncated, holds more data than its header announces, or its gzip data is damaged.
KINDLING_API at::Tensor read_idx_file(const std::string& path);

/// MNIST, or Fashion-MNIST (the same format; see FashionMNIST), from `root`, which holds
/// train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte and
/// t10k-labels-idx1-ubyte, each either gzip-compressed with a ".gz" suffix (read directly,
/// no gunzip step) or uncompressed. `train` picks the training split (60000 samples) or the
/// test split (10000).
///
/// get(i).data is uint8 [1, 28, 28]; get(i).target an int64 scalar in [0, 9].
/// Throws kindling::Error naming the file for a missing `root` directory or file, a wrong
/// magic number, images that are not 28x28, image and label counts that differ, labels
/// outside [0, 9], or a truncated or damaged file.
class KINDLING_API MNIST : public Dataset {
 public:
  explicit MNIST(const std::string& root, bool train = true);

  int64_t size() const override { return targets_.size(0); }
  /// Views of sample `index`. Throws kindling::UsageError for an index outside [0, size()).
  Example get(int64_t index) const override;
  /// "FashionMNIST(train, 60000)" when `root` names Fashion-MNIST (its path contains
  /// "fashion", as kFashionMnistRoot does), else "MNIST(test, 10000)".
  std::string name() const override;

  /// All images, uint8 [n, 1, 28, 28].
  const at::Tensor& images() const { return images_; }
  /// All labels, int64 [n].
  const at::Tensor& targets() const { return targets_; }
  bool train() const { return train_; }

 private:
  std::string dataset_name_;
  bool train_;
  at::Tensor images_;
  at::Tensor targets_;
};

/// Fashion-MNIST has MNIST's file names and format: FashionMNIST(kFashionMnistRoot).
using FashionMNIST = MNIST;

/// CIFAR-10, binary version (cifar-10-binary.tar.gz). `root` is the extracted
/// cifar-10-batches-bin directory, or the directory that contains it. The training split
/// is data_batch_1.bin ... data_batch_5.bin (50000 samples), the test split test_batch.bin
/// (10000). Each record of a file is one label byte (0-9) followed by 3072 pixel bytes:
/// the 32x32 red plane, then green, then blue, each row-major.
///
/// get(i).data is uint8 [3, 32, 32] (channels R, G, B); get(i).target an int64 scalar in
/// [0, 9] (see classes()). Throws kindling::Error naming the file for a missing directory
/// or file, a file whose size is not a positive multiple of 3073 bytes, a file that cannot
/// be opened or read, or a label byte outside [0, 9].
class KINDLING_API CIFAR10 : public Dataset {
 public:
  explicit CIFAR10(const std::string& root, bool train = true);

  int64_t size() const override { return targets_.size(0); }
  /// Views of sample `index`. Throws kindling::UsageError for an index outside [0, size()).
  Example get(int64_t index) const override;
  /// "CIFAR10(train, 50000)".
  std::string name() const override;

  /// All images, uint8 [n, 3, 32, 32].
  const at::Tensor& images() const { return images_; }
  /// All labels, int64 [n].
  const at::Tensor& targets() const { return targets_; }
  bool train() const { return train_; }

  /// The class names, indexed by label: "airplane", "automobile", ..., "truck".
  static const std::vector<std::string>& classes();

 private:
  bool train_;
  at::Tensor images_;
  at::Tensor targets_;
};

}  // namespace data
}  // namespace kindling
