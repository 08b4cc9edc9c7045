// MNIST / Fashion-MNIST (IDX files, gzip or not) and CIFAR-10 (binary version); see
// include/kindling/data/datasets.h.
#include "kindling/data/datasets.h"

#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <sstream>
#include <system_error>
#include <type_traits>
#include <utility>

#include "common/files.h"
#include "kindling/error.h"

namespace kindling {
namespace data {
namespace {

constexpr const char* kMnistHint =
    "; for Fashion-MNIST install the Debian package dataset-fashion-mnist (apt-get install "
    "dataset-fashion-mnist), which puts its files in /usr/share/datasets/fashion-mnist "
    "(kindling::data::kFashionMnistRoot); for MNIST put train-images-idx3-ubyte, train-labels-idx1-ubyte, "
    "t10k-images-idx3-ubyte and t10k-labels-idx1-ubyte (each may be .gz) in the directory";

constexpr const char* kCifarHint =
    "; download the CIFAR-10 binary version (cifar-10-binary.tar.gz from https://www.cs.toronto.edu/~kriz/cifar.html), "
    "extract it, and pass the cifar-10-batches-bin directory or the directory that contains it";

std::string hex32(uint32_t value) {
  char text[16];
  std::snprintf(text, sizeof text, "0x%08x", static_cast<unsigned>(value));
  return text;
}

std::string describe_sizes(const std::vector<int64_t>& sizes) {
  std::ostringstream out;
  for (std::size_t i = 0; i < sizes.size(); ++i) out << (i ? "x" : "") << sizes[i];
  return out.str();
}

void check_index(int64_t index, const Dataset& dataset) {
  KINDLING_CHECK(index >= 0 && index < dataset.size(), "kindling::data::", dataset.name(), ": sample index ", index,
                 " is out of range; it must be in [0, ", dataset.size(), ")");
}

// What stat(2) says of a path, for the datasets' messages (why not std::filesystem:
// src/common/files.h, whose helpers serve the rest).
struct PathInfo {
  bool exists = false;
  bool dir = false;
  bool file = false;
  uint64_t size = 0;
  int error = 0;  // errno of a failed stat
};

PathInfo path_info(const std::string& path) {
  struct stat st {};
  PathInfo info;
  if (::stat(path.c_str(), &st) != 0) {
    info.error = errno;
    return info;
  }
  info.exists = true;
  info.dir = S_ISDIR(st.st_mode);
  info.file = S_ISREG(st.st_mode);
  info.size = static_cast<uint64_t>(st.st_size);
  return info;
}

// Checks that `dir` is an existing directory; `who` names the dataset in the message.
void check_directory(const std::string& dir, const std::string& who, const char* hint) {
  const PathInfo info = path_info(dir);
  KINDLING_CHECK_T(Error, info.exists, who, ": the directory ", dir, " does not exist", hint);
  KINDLING_CHECK_T(Error, info.dir, who, ": ", dir, " is not a directory", hint);
}

using ::kindling::detail::is_directory;
using ::kindling::detail::is_regular_file;
using ::kindling::detail::join_path;

// ---- gzip-or-plain reading with zlib ----

struct GzCloser {
  void operator()(gzFile file) const { gzclose(file); }
};
using GzFile = std::unique_ptr<std::remove_pointer_t<gzFile>, GzCloser>;

GzFile open_gz(const std::string& path, const std::string& who) {
  errno = 0;
  GzFile file(gzopen(path.c_str(), "rb"));
  const int error = errno;
  KINDLING_CHECK_T(Error, file != nullptr, who, ": cannot open ", path, " (",
                   error != 0 ? std::strerror(error) : "out of memory", ")");
  gzbuffer(file.get(), 1 << 20);
  return file;
}

// Reads up to `bytes` bytes (fewer only at the end of the data); gzread reads an uncompressed
// file as it is. Throws when the compressed data is damaged.
std::size_t read_up_to(gzFile file, unsigned char* out, std::size_t bytes, const std::string& path,
                       const std::string& who) {
  std::size_t done = 0;
  while (done < bytes) {
    const auto piece = static_cast<unsigned>(std::min<std::size_t>(bytes - done, std::size_t{1} << 30));
    const int got = gzread(file, out + done, piece);
    if (got < 0) {
      int code = 0;
      const char* message = gzerror(file, &code);
      KINDLING_CHECK_T(Error, false, who, ": cannot decompress ", path, ": ", message,
                       "; the file is damaged, download or install it again");
    }
    if (got == 0) break;
    done += static_cast<std::size_t>(got);
  }
  return done;
}

uint32_t big_endian_u32(const unsigned char* b) {
  return (uint32_t{b[0]} << 24) | (uint32_t{b[1]} << 16) | (uint32_t{b[2]} << 8) | uint32_t{b[3]};
}

struct IdxType {
  at::ScalarType dtype;
  std::size_t bytes;
  const char* name;
};

bool idx_type(unsigned code, IdxType* type) {
  switch (code) {
    case 0x08: *type = {at::kByte, 1, "uint8"}; return true;
    case 0x09: *type = {at::kChar, 1, "int8"}; return true;
    case 0x0B: *type = {at::kShort, 2, "int16"}; return true;
    case 0x0C: *type = {at::kInt, 4, "int32"}; return true;
    case 0x0D: *type = {at::kFloat, 4, "float32"}; return true;
    case 0x0E: *type = {at::kDouble, 8, "float64"}; return true;
    default: return false;
  }
}

bool host_is_little_endian() {
  const uint16_t one = 1;
  unsigned char first = 0;
  std::memcpy(&first, &one, 1);
  return first == 1;
}

struct IdxFile {
  uint32_t magic;
  at::Tensor tensor;
};

// Reads the IDX file at `path`. When `expected_magic` is not 0, a different magic number is
// an error saying that the file is not an MNIST `kind` file (checked before the data is read).
IdxFile read_idx(const std::string& path, const std::string& who, uint32_t expected_magic = 0, const char* kind = "") {
  GzFile file = open_gz(path, who);
  unsigned char header[4] = {};
  const std::size_t header_bytes = read_up_to(file.get(), header, sizeof header, path, who);
  KINDLING_CHECK_T(Error, header_bytes == sizeof header, who, ": ", path, " is too short to be an IDX file (",
                   header_bytes, " bytes of data; the magic number alone takes 4)");
  const uint32_t magic = big_endian_u32(header);
  if (expected_magic != 0) {
    KINDLING_CHECK_T(
        Error, magic == expected_magic, who, ": ", path, " is not an MNIST ", kind, " file: its magic number is ",
        hex32(magic), " (", magic, ") instead of ", hex32(expected_magic), " (", expected_magic, ")",
        magic == 0x801u || magic == 0x803u ? "; the images and labels files seem to be mixed up" : "; check the file");
  }
  IdxType type{};
  const unsigned ndim = header[3];
  KINDLING_CHECK_T(Error, header[0] == 0 && header[1] == 0 && idx_type(header[2], &type) && ndim >= 1, who, ": ", path,
                   " is not an IDX file: its magic number ", hex32(magic),
                   " does not have the form 0x0000TTDD (TT the element type, 08, 09, 0b, 0c, 0d or 0e; DD the "
                   "number of dimensions, at least 1)");

  std::vector<unsigned char> dim_bytes(4 * ndim);
  const std::size_t got_dims = read_up_to(file.get(), dim_bytes.data(), dim_bytes.size(), path, who);
  KINDLING_CHECK_T(Error, got_dims == dim_bytes.size(), who, ": ", path, " is truncated: its header announces ", ndim,
                   " dimensions but ends after ", got_dims / 4, "; download or install the file again");
  std::vector<int64_t> sizes(ndim);
  // At most 2^40 elements, so that the byte count below cannot overflow.
  constexpr uint64_t kMaxElements = uint64_t{1} << 40;
  uint64_t numel = 1;
  for (unsigned d = 0; d < ndim; ++d) {
    const uint32_t size = big_endian_u32(dim_bytes.data() + 4 * d);
    sizes[d] = size;
    KINDLING_CHECK_T(Error, size == 0 || numel <= kMaxElements / size, who, ": ", path,
                     " is not a sensible IDX file: its header announces more than 2^40 elements");
    numel *= size;
  }
  const std::size_t bytes = static_cast<std::size_t>(numel) * type.bytes;

  // Read in chunks into a growing buffer, so that a damaged header announcing huge
  // dimensions fails on the short data instead of allocating all of it first.
  auto buffer = std::make_unique<std::vector<unsigned char>>();
  constexpr std::size_t kChunk = std::size_t{64} << 20;
  std::size_t done = 0;
  while (done < bytes) {
    const std::size_t want = std::min(bytes - done, kChunk);
    if (buffer->capacity() < done + want) {
      buffer->reserve(std::min(bytes, std::max(done + want, 2 * buffer->capacity())));
    }
    buffer->resize(done + want);
    const std::size_t got = read_up_to(file.get(), buffer->data() + done, want, path, who);
    done += got;
    if (got < want) break;
  }
  KINDLING_CHECK_T(Error, done == bytes, who, ": ", path, " is truncated: its header announces ", describe_sizes(sizes),
                   " ", type.name, " values (", bytes, " bytes) but it holds only ", done,
                   " bytes of data; download or install the file again");
  unsigned char extra = 0;
  KINDLING_CHECK_T(Error, read_up_to(file.get(), &extra, 1, path, who) == 0, who, ": ", path,
                   " holds more data than its header announces (", describe_sizes(sizes), " ", type.name,
                   " values); the file is damaged or not an IDX file");

  if (type.bytes > 1 && host_is_little_endian()) {
    for (std::size_t pos = 0; pos < bytes; pos += type.bytes) {
      std::reverse(buffer->data() + pos, buffer->data() + pos + type.bytes);
    }
  }
  IdxFile result{magic, {}};
  const auto options = at::TensorOptions().dtype(type.dtype);
  if (bytes == 0) {
    result.tensor = at::empty(sizes, options);
  } else {
    // The tensor takes over the buffer (no copy); its deleter frees it.
    std::vector<unsigned char>* owned = buffer.release();
    result.tensor = at::from_blob(
        owned->data(), sizes, [owned](void*) { delete owned; }, options);
  }
  return result;
}

// root/base.gz if it exists (zlib checks its CRC), else root/base; throws when neither does.
std::string find_idx_file(const std::string& root, const std::string& base, const std::string& who) {
  const std::string plain = join_path(root, base);
  const std::string gz = plain + ".gz";
  if (is_regular_file(gz)) return gz;
  if (is_regular_file(plain)) return plain;
  KINDLING_CHECK_T(Error, false, who, ": cannot find ", gz, " (nor the uncompressed ", plain, ")", kMnistHint);
  return {};
}

bool names_fashion_mnist(const std::string& root) {
  std::string lower = root;
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return lower.find("fashion") != std::string::npos;
}

// ---- CIFAR-10 ----

constexpr int64_t kCifarPixels = 3 * 32 * 32;
constexpr int64_t kCifarRecord = 1 + kCifarPixels;

struct FileCloser {
  void operator()(std::FILE* file) const { std::fclose(file); }
};

}  // namespace

at::Tensor read_idx_file(const std::string& path) { return read_idx(path, "kindling::data::read_idx_file").tensor; }

// ---- MNIST ----

MNIST::MNIST(const std::string& root, bool train)
    : dataset_name_(names_fashion_mnist(root) ? "FashionMNIST" : "MNIST"), train_(train) {
  const std::string who = "kindling::data::" + dataset_name_;
  check_directory(root, who, kMnistHint);
  const std::string prefix = train ? "train" : "t10k";
  const std::string images_path = find_idx_file(root, prefix + "-images-idx3-ubyte", who);
  const std::string labels_path = find_idx_file(root, prefix + "-labels-idx1-ubyte", who);

  // Labels first: they are small, so mismatched files are found before the images are read.
  at::Tensor labels = read_idx(labels_path, who, 0x801u, "labels").tensor;
  at::Tensor images = read_idx(images_path, who, 0x803u, "images").tensor;
  KINDLING_CHECK_T(Error, images.size(1) == 28 && images.size(2) == 28, who, ": ", images_path, " holds ",
                   images.size(1), "x", images.size(2), " images; MNIST and Fashion-MNIST images are 28x28");
  const int64_t n = images.size(0);
  KINDLING_CHECK_T(Error, labels.size(0) == n, who, ": ", images_path, " holds ", n, " images but ", labels_path,
                   " holds ", labels.size(0), " labels; the files do not belong together");
  const uint8_t* label_data = labels.data_ptr<uint8_t>();
  int64_t bad = 0;
  int64_t first_bad = -1;
  for (int64_t i = 0; i < n; ++i) {
    if (label_data[i] > 9) {
      if (bad++ == 0) first_bad = i;
    }
  }
  KINDLING_CHECK_T(Error, bad == 0, who, ": ", labels_path, " has ", bad, " labels outside [0, 9] (the first is ",
                   first_bad >= 0 ? static_cast<int>(label_data[first_bad]) : 0, " at index ", first_bad,
                   "); the file is damaged");

  images_ = images.view({n, 1, 28, 28});
  targets_ = labels.to(at::kLong);
}

Example MNIST::get(int64_t index) const {
  check_index(index, *this);
  return {images_.select(0, index), targets_.select(0, index)};
}

std::string MNIST::name() const {
  return dataset_name_ + "(" + (train_ ? "train" : "test") + ", " + std::to_string(size()) + ")";
}

// ---- CIFAR10 ----

CIFAR10::CIFAR10(const std::string& root, bool train) : train_(train) {
  const std::string who = "kindling::data::CIFAR10";
  check_directory(root, who, kCifarHint);
  std::vector<std::string> names;
  if (train) {
    for (int i = 1; i <= 5; ++i) names.push_back("data_batch_" + std::to_string(i) + ".bin");
  } else {
    names.push_back("test_batch.bin");
  }
  std::string dir = root;
  const std::string nested = join_path(root, "cifar-10-batches-bin");
  if (!is_regular_file(join_path(dir, names[0])) && is_directory(nested)) dir = nested;

  std::vector<std::string> paths;
  std::vector<int64_t> records;
  int64_t total = 0;
  for (const std::string& name : names) {
    const std::string path = join_path(dir, name);
    const PathInfo info = path_info(path);
    if (!info.file) {
      std::string also;
      if (dir == root) also = " (nor " + join_path(nested, name) + ")";
      const bool python_version =
          is_regular_file(join_path(dir, name.substr(0, name.size() - 4))) ||
          is_directory(join_path(root, "cifar-10-batches-py"));
      KINDLING_CHECK_T(Error, false, who, ": cannot find ", path, also,
                       python_version ? "; the directory seems to hold CIFAR-10's Python version, but kindling reads "
                                        "the binary version"
                                      : "",
                       kCifarHint);
    }
    const uint64_t bytes = info.size;
    KINDLING_CHECK_T(Error, bytes > 0, who, ": ", path, " is empty; download and extract it again");
    KINDLING_CHECK_T(Error, bytes % kCifarRecord == 0, who, ": ", path, " is ", bytes,
                     " bytes, not a multiple of the 3073-byte CIFAR-10 record (1 label byte and 3072 pixel bytes); "
                     "the file is truncated or is not from CIFAR-10's binary version",
                     bytes % 3074 == 0 ? " (3074-byte records are CIFAR-100's)" : "",
                     "; download and extract it again");
    paths.push_back(path);
    records.push_back(static_cast<int64_t>(bytes / kCifarRecord));
    total += records.back();
  }

  images_ = at::empty({total, 3, 32, 32}, at::TensorOptions().dtype(at::kByte));
  targets_ = at::empty({total}, at::TensorOptions().dtype(at::kLong));
  uint8_t* pixels = images_.data_ptr<uint8_t>();
  int64_t* labels = targets_.data_ptr<int64_t>();
  std::vector<unsigned char> buffer;
  int64_t next = 0;
  for (std::size_t f = 0; f < paths.size(); ++f) {
    const std::string& path = paths[f];
    errno = 0;
    std::unique_ptr<std::FILE, FileCloser> file(std::fopen(path.c_str(), "rb"));
    const int error = errno;
    KINDLING_CHECK_T(Error, file != nullptr, who, ": cannot open ", path, " (", std::strerror(error), ")");
    buffer.resize(static_cast<std::size_t>(records[f] * kCifarRecord));
    const std::size_t got = std::fread(buffer.data(), 1, buffer.size(), file.get());
    KINDLING_CHECK_T(Error, got == buffer.size(), who, ": cannot read ", path, " (",
                     std::ferror(file.get()) ? std::strerror(errno) : "it became shorter while being read", ")");
    for (int64_t r = 0; r < records[f]; ++r) {
      const unsigned char* record = buffer.data() + r * kCifarRecord;
      KINDLING_CHECK_T(Error, record[0] <= 9, who, ": ", path, ": record ", r, " has label byte ",
                       static_cast<int>(record[0]),
                       "; CIFAR-10 labels are 0-9, so the file is damaged or is not from CIFAR-10's binary version");
      labels[next] = record[0];
      std::memcpy(pixels + next * kCifarPixels, record + 1, static_cast<std::size_t>(kCifarPixels));
      ++next;
    }
  }
}

Example CIFAR10::get(int64_t index) const {
  check_index(index, *this);
  return {images_.select(0, index), targets_.select(0, index)};
}

std::string CIFAR10::name() const {
  return std::string("CIFAR10(") + (train_ ? "train" : "test") + ", " + std::to_string(size()) + ")";
}

const std::vector<std::string>& CIFAR10::classes() {
  static const std::vector<std::string> names = {"airplane", "automobile", "bird",  "cat",  "deer",
                                                 "dog",      "frog",       "horse", "ship", "truck"};
  return names;
}

}  // namespace data
}  // namespace kindling
