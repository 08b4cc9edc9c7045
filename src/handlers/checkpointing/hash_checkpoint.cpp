// hash_checkpoint: SHA-256 by OpenSSL's libcrypto (the EVP digest calls; the digest is not
// written here), the move by rename(2), or by common/files.h's replace_file across file
// systems.
#include "kindling/handlers/checkpointing/hash_checkpoint.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "common/files.h"
#include "kindling/error.h"

namespace kindling {
namespace handlers {

namespace {

const char* const kWho = "kindling::handlers::hash_checkpoint";

[[noreturn]] void fail(const std::string& step, const std::string& path, int error) {
  throw Error(std::string(kWho) + ": " + step + " '" + path + "' failed: " + std::strerror(error));
}

// The whole file, read in one pass that feeds `each` block by block.
template <typename F>
void read_blocks(const std::string& path, F each) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("opening", path, errno);
  std::vector<char> block(1 << 20);
  for (;;) {
    const ssize_t got = ::read(fd, block.data(), block.size());
    if (got == 0) break;
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      const int error = errno;
      ::close(fd);
      fail("reading", path, error);
    }
    each(block.data(), static_cast<std::size_t>(got));
  }
  ::close(fd);
}

std::string sha256_of(const std::string& path) {
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  KINDLING_CHECK(ctx && EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) == 1,
                 std::string(kWho) + ": OpenSSL could not start a SHA-256 digest");
  read_blocks(path, [&](const char* data, std::size_t size) { EVP_DigestUpdate(ctx.get(), data, size); });
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  KINDLING_CHECK(EVP_DigestFinal_ex(ctx.get(), digest, &size) == 1,
                 std::string(kWho) + ": OpenSSL could not finish the SHA-256 digest of '" + path + "'");
  std::string hex;
  for (unsigned int i = 0; i < size; ++i) {
    char two[3];
    std::snprintf(two, sizeof(two), "%02x", digest[i]);
    hex += two;
  }
  return hex;
}

// Python's Path.stem: the name without its last extension (a leading dot is not one).
std::string stem_of(const std::string& path) {
  const std::string name = path.substr(path.find_last_of('/') == std::string::npos ? 0 : path.find_last_of('/') + 1);
  const std::size_t dot = name.rfind('.');
  return dot == std::string::npos || dot == 0 || dot + 1 == name.size() ? name : name.substr(0, dot);
}

// A move to another file system: the whole file written at `to`, then `from` removed.
void copy_then_remove(const std::string& from, const std::string& to) {
  std::string bytes;
  read_blocks(from, [&](const char* data, std::size_t size) { bytes.append(data, size); });
  detail::replace_file(to, to + ".tmp-" + std::to_string(::getpid()), bytes.data(), bytes.size(), kWho);
  if (::unlink(from.c_str()) != 0) fail("removing the moved", from, errno);
  detail::sync_directory(detail::parent_directory(from).empty() ? "." : detail::parent_directory(from));
}

}  // namespace

HashedCheckpoint hash_checkpoint(const std::string& checkpoint_path, const std::string& output_dir) {
  if (!detail::is_regular_file(checkpoint_path)) {
    throw UsageError(std::string(kWho) + ": '" + checkpoint_path +
                     "' is not a file (it does not exist, or it is a directory); give the path of a checkpoint "
                     "that was written, e.g. Checkpoint::last_checkpoint()");
  }
  HashedCheckpoint out;
  out.sha256 = sha256_of(checkpoint_path);
  detail::make_directories(output_dir, kWho);
  out.path = detail::join_path(output_dir, stem_of(checkpoint_path) + "-" + out.sha256.substr(0, 8) + ".pt");
  if (::rename(checkpoint_path.c_str(), out.path.c_str()) == 0) {
    detail::sync_directory(output_dir);
  } else if (errno == EXDEV) {
    copy_then_remove(checkpoint_path, out.path);
  } else {
    fail("moving '" + checkpoint_path + "' to", out.path, errno);
  }
  return out;
}

}  // namespace handlers
}  // namespace kindling
