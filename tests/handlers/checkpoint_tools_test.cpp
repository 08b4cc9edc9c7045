// The small checkpoint tools ignite has in its utils and deterministic modules:
// hash_checkpoint (kindling/handlers/checkpointing/hash_checkpoint.h) against coreutils'
// sha256sum and, where the build's Python imports it (the LibTorch 2.15 venv), ignite 0.5.5's
// own hash_checkpoint on the same bytes; keep_random_state (stateful.h).
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>

#include "kindling/handlers/checkpointing/hash_checkpoint.h"
#include "kindling/handlers/checkpointing/stateful.h"
#include "support/errors.h"
#include "support/files.h"
#include "support/multiprocess.h"

namespace kh = kindling::handlers;
using kindling::testing::error_of;
using kindling::testing::run_command;
using kindling::testing::TempDir;

namespace checkpoint_tools_test {

std::string write_bytes(const std::string& path, std::size_t size) {
  std::string bytes;
  for (std::size_t i = 0; i < size; ++i) bytes += static_cast<char>((i * 131 + i / 7) % 256);
  std::ofstream(path, std::ios::binary) << bytes;
  return bytes;
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

std::string sha256sum(const std::string& path) {
  const auto r = run_command({"/usr/bin/sha256sum", path});
  EXPECT_TRUE(r.ok()) << r.out;
  return r.out.substr(0, 64);
}

// 3 MiB and a bit: more than one of the reader's 1 MiB blocks.
TEST(CheckpointToolsTest, HashCheckpointMovesTheFileUnderItsShaAsIgniteNamesIt) {
  TempDir dir("hash-checkpoint");
  const std::string from = dir.path() + "/best_model_3.ckpt";
  const std::string bytes = write_bytes(from, (3u << 20) + 12345);
  const std::string want = sha256sum(from);
  const kh::HashedCheckpoint hashed = kh::hash_checkpoint(from, dir.path() + "/release/v1");
  EXPECT_EQ(hashed.sha256, want);
  EXPECT_EQ(hashed.path, dir.path() + "/release/v1/best_model_3-" + want.substr(0, 8) + ".pt");
  EXPECT_EQ(read_bytes(hashed.path), bytes);
  EXPECT_EQ(::access(from.c_str(), F_OK), -1) << "moved, not copied (as ignite's shutil.move)";
}

// ignite's own, where the build's Python has it: the same name and digest for the same bytes.
TEST(CheckpointToolsTest, HashCheckpointEqualsIgnite055s) {
  TempDir dir("hash-checkpoint-ignite");
  const std::string again = dir.path() + "/best_model_3.ckpt";
  write_bytes(again, (3u << 20) + 12345);
  const std::string want = sha256sum(again);
  const kh::HashedCheckpoint ours = kh::hash_checkpoint(again, dir.path() + "/kindling");
  write_bytes(again, (3u << 20) + 12345);
  const auto r = run_command({KINDLING_PYTHON, "-c",
                              "import sys\n"
                              "try:\n    from ignite.utils import hash_checkpoint\n"
                              "except ImportError:\n    sys.exit(77)\n"
                              "p, h = hash_checkpoint(sys.argv[1], sys.argv[2])\nprint(p, h)\n",
                              again, dir.path() + "/ignite"});
  if (r.exit_code == 77) GTEST_SKIP() << "this Python does not import ignite (the 2.15 venv does)";
  ASSERT_TRUE(r.ok()) << r.out;
  EXPECT_EQ(r.out, dir.path() + "/ignite/best_model_3-" + want.substr(0, 8) + ".pt " + want + "\n");
  EXPECT_EQ(ours.path, dir.path() + "/kindling/best_model_3-" + want.substr(0, 8) + ".pt");
  EXPECT_EQ(ours.sha256, want);
}

// /dev/shm is a tmpfs, another file system than /tmp here: rename(2) fails with EXDEV and the
// file is written whole at the new place, then removed.
TEST(CheckpointToolsTest, HashCheckpointMovesAcrossFileSystems) {
  TempDir out("hash-checkpoint-out");
  const std::string from = "/dev/shm/kindling-hash-" + std::to_string(::getpid()) + ".pt";
  struct stat a {
  }, b{};
  if (::stat("/dev/shm", &a) != 0 || ::stat(out.path().c_str(), &b) != 0 || a.st_dev == b.st_dev) {
    GTEST_SKIP() << "/dev/shm and " << out.path() << " are one file system here: nothing to cross";
  }
  const std::string bytes = write_bytes(from, 100000);
  const kh::HashedCheckpoint hashed = kh::hash_checkpoint(from, out.path());
  EXPECT_EQ(hashed.path, out.path() + "/" + "kindling-hash-" + std::to_string(::getpid()) + "-" +
                             hashed.sha256.substr(0, 8) + ".pt");
  EXPECT_EQ(read_bytes(hashed.path), bytes);
  EXPECT_EQ(::access(from.c_str(), F_OK), -1);
  EXPECT_EQ(kindling::testing::files_in(out.path()).size(), 1u) << "no temporary file left";
}

TEST(CheckpointToolsTest, HashCheckpointRefusesWhatIsNotAFile) {
  TempDir dir("hash-checkpoint-misuse");
  const std::string missing = error_of([&] { kh::hash_checkpoint(dir.path() + "/none.pt", dir.path()); });
  EXPECT_NE(missing.find("none.pt' is not a file"), std::string::npos) << missing;
  const std::string folder = error_of([&] { kh::hash_checkpoint(dir.path(), dir.path() + "/out"); });
  EXPECT_NE(folder.find("is not a file"), std::string::npos) << folder;
}

TEST(CheckpointToolsTest, KeepRandomStateLeavesTheGeneratorAsItWas) {
  at::manual_seed(7);
  const at::Tensor expected = at::rand({4});
  at::manual_seed(7);
  auto draw = kh::keep_random_state([](int64_t n) { return at::rand({n}); });
  const at::Tensor inside = draw(1000);
  EXPECT_EQ(inside.size(0), 1000);
  EXPECT_TRUE(at::equal(at::rand({4}), expected)) << "the draw inside did not move the generator";
  // Also when the function throws.
  at::manual_seed(7);
  auto throws = kh::keep_random_state([] {
    at::rand({10});
    throw std::runtime_error("boom");
  });
  EXPECT_THROW(throws(), std::runtime_error);
  EXPECT_TRUE(at::equal(at::rand({4}), expected));
}

}  // namespace checkpoint_tools_test
