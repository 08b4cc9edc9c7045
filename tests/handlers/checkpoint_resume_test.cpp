// Checkpoint across a resume: an earlier attempt's files count towards n_saved (by step and
// by score), a run that starts afresh leaves files it did not write, and every rank of a
// world decides alike (the saver's rank lists its folder for all). What a resume trusts:
// garbage inside a record, over a zip header, or a cut file is refused as damaged, naming
// the file, and find_latest_intact falls back to the previous checkpoint with a warning.
#include <gtest/gtest.h>

#include <torch/nn/modules/linear.h>

#include <unistd.h>

#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "kindling/dist/dist.h"
#include "kindling/engine/engine.h"
#include "kindling/handlers/checkpointing/checkpoint.h"
#include "support/errors.h"
#include "support/files.h"
#include "support/multiprocess.h"

namespace {

namespace kd = kindling::dist;
namespace kh = kindling::handlers;
using kindling::engine::Engine;
using kindling::engine::Events;
using kindling::engine::Value;

// The score of iteration i (1-based) for the score-ranked checkpoints.
const std::map<int64_t, double> kScores{{1, 0.5}, {2, 0.9}, {3, 0.1},  {4, 0.7},
                                        {5, 0.8}, {6, 0.2}, {7, 0.95}, {8, 0.3}};

struct Attempt {
  std::vector<std::string> files;    // the folder after the attempt
  std::size_t counted_at_start = 0;  // the checkpoint's files right after STARTED
};

// One attempt of a run of 8 iterations that saves the trainer at every iteration into `dir`
// with n_saved(2): it resumes from the folder's latest file when there is one, and stops
// after iteration `stop_at`.
Attempt run_attempt(const std::string& dir, int64_t stop_at, bool by_score) {
  Engine trainer([](Engine&, const int& b) -> Value { return b; });
  kh::Objects objects{{"trainer", kh::stateful(trainer)}};
  auto options = kh::CheckpointOptions().filename_prefix("training").n_saved(2);
  if (by_score) options.score_name("acc").score_function([](Engine& e) { return kScores.at(e.state().iteration); });
  auto saver = std::make_shared<kh::DiskSaver>(dir, kh::DiskSaverOptions().require_empty(false));
  auto checkpoint = std::make_shared<kh::Checkpoint>(objects, saver, options);
  checkpoint->attach(trainer, Events::ITERATION_COMPLETED);
  Attempt attempt;
  trainer.on(Events::STARTED, [&](Engine&) { attempt.counted_at_start = checkpoint->saved().size(); });
  trainer.on(Events::ITERATION_COMPLETED, [stop_at](Engine& e) {
    if (e.state().iteration == stop_at) e.terminate();
  });
  // The latest file by step: a by-score folder is resumed from the trainer's own record.
  if (auto last = kh::Checkpoint::find_latest(dir, "training")) kh::Checkpoint::load_objects(objects, *last);
  // Several ranks share the folder: all have loaded before rank 0 writes, and list it after.
  if (kd::get_world_size() > 1) kd::barrier();
  trainer.run(std::vector<int>(8, 0), 1);
  if (kd::get_world_size() > 1) kd::barrier();
  attempt.files = kindling::testing::files_in(dir);
  return attempt;
}

TEST(CheckpointResumeTest, NSavedHoldsAcrossAResumeRankedByStep) {
  kindling::testing::TempDir dir("resume");
  const Attempt first = run_attempt(dir.path(), 4, false);
  EXPECT_EQ(first.files, (std::vector<std::string>{"training_trainer_3.pt", "training_trainer_4.pt"}));
  EXPECT_EQ(first.counted_at_start, 0u);
  const Attempt second = run_attempt(dir.path(), 8, false);
  EXPECT_EQ(second.counted_at_start, 2u);
  EXPECT_EQ(second.files, (std::vector<std::string>{"training_trainer_7.pt", "training_trainer_8.pt"}));
}

TEST(CheckpointResumeTest, NSavedHoldsAcrossAResumeRankedByScore) {
  kindling::testing::TempDir dir("resume");
  const Attempt first = run_attempt(dir.path(), 4, true);
  EXPECT_EQ(first.files,
            (std::vector<std::string>{"training_trainer_acc=0.7000.pt", "training_trainer_acc=0.9000.pt"}));
  const Attempt second = run_attempt(dir.path(), 8, true);
  EXPECT_EQ(second.counted_at_start, 2u);
  // 0.8 replaced 0.7, then 0.95 replaced 0.8: the best two of all 8 iterations.
  EXPECT_EQ(second.files,
            (std::vector<std::string>{"training_trainer_acc=0.9000.pt", "training_trainer_acc=0.9500.pt"}));
}

TEST(CheckpointResumeTest, ARunFromTheStartLeavesFilesItDidNotWrite) {
  kindling::testing::TempDir dir("resume");
  std::ofstream(dir.path() + "/training_trainer_100.pt") << "another run's file";
  std::ofstream(dir.path() + "/notes.txt") << "the user's notes";
  Engine trainer([](Engine&, const int& b) -> Value { return b; });
  auto checkpoint = std::make_shared<kh::Checkpoint>(kh::Objects{{"trainer", kh::stateful(trainer)}}, dir.path(),
                                                     kh::CheckpointOptions().filename_prefix("training").n_saved(2));
  checkpoint->attach(trainer, Events::ITERATION_COMPLETED);
  trainer.run(std::vector<int>(4, 0), 1);
  EXPECT_EQ(kindling::testing::files_in(dir.path()),
            (std::vector<std::string>{"notes.txt", "training_trainer_100.pt", "training_trainer_3.pt",
                                      "training_trainer_4.pt"}));
}

// Both ranks run both attempts on one folder (rank 0 saves): rank 1 never lists the folder,
// yet counts the same earlier files, so the ranks keep deciding alike.
KINDLING_WORKER(checkpoint_resume_ranks) {
  kd::initialize("gloo");
  const std::string dir = std::getenv("CKPT_DIR");
  const Attempt first = run_attempt(dir, 4, true);
  const Attempt second = run_attempt(dir, 8, true);
  WCHECK(first.counted_at_start == 0 && second.counted_at_start == 2,
         << "rank " << kd::get_rank() << " counted " << first.counted_at_start << " then " << second.counted_at_start
         << " files at the start");
  WCHECK(second.files.size() == 2 && second.files[1] == "training_trainer_acc=0.9500.pt",
         << "rank " << kd::get_rank() << " sees " << second.files.size() << " files");
  kd::finalize();
}

TEST(CheckpointResumeTest, EveryRankCountsTheSaversFiles) {
  kindling::testing::TempDir dir("resume");
  kindling::testing::LaunchOptions opts;
  opts.world_size = 2;
  opts.env["CKPT_DIR"] = dir.path();
  const auto results = kindling::testing::run_workers("checkpoint_resume_ranks", opts);
  for (const auto& r : results) EXPECT_TRUE(r.ok()) << kindling::testing::describe(results);
}

// A checkpoint of a 512x1024 linear layer (2 MiB of weights), one file per step in `dir`;
// returns the last file's path.
std::string save_linear_steps(const std::string& dir, torch::nn::Linear& model, int steps) {
  Engine trainer([](Engine&, const int& b) -> Value { return b; });
  auto checkpoint =
      std::make_shared<kh::Checkpoint>(kh::Objects{{"model", kh::stateful(model)}, {"trainer", kh::stateful(trainer)}},
                                       dir, kh::CheckpointOptions().filename_prefix("training").n_saved_all());
  checkpoint->attach(trainer, Events::ITERATION_COMPLETED);
  trainer.run(std::vector<int>(static_cast<std::size_t>(steps), 0), 1);
  return *checkpoint->last_checkpoint();
}

// Writes `size` random bytes over the file at `offset` (the file keeps its length).
void write_garbage(const std::string& path, std::size_t offset, std::size_t size) {
  std::mt19937 random(7);
  std::string garbage(size, '\0');
  for (auto& c : garbage) c = static_cast<char>(random());
  std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
  file.seekp(static_cast<std::streamoff>(offset));
  file.write(garbage.data(), static_cast<std::streamsize>(size));
}

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// What load_objects throws for the file at `path`; the model must not have changed.
std::string refusal(const std::string& path) {
  torch::nn::Linear model(1024, 512);
  const at::Tensor before = model->weight.detach().clone();
  Engine trainer([](Engine&, const int& b) -> Value { return b; });
  const std::string what = kindling::testing::error_of<kh::DamagedCheckpointError>([&] {
    kh::Checkpoint::load_objects({{"model", kh::stateful(model)}, {"trainer", kh::stateful(trainer)}}, path);
  });
  EXPECT_TRUE(at::equal(model->weight, before)) << path;
  EXPECT_EQ(trainer.state().iteration, 0) << path;
  return what;
}

TEST(CheckpointResumeTest, GarbageInsideARecordIsRefusedAsDamagedNamingTheFile) {
  kindling::testing::TempDir dir("damaged");
  torch::nn::Linear model(1024, 512);
  const std::string path = save_linear_steps(dir.path(), model, 1);
  kh::Checkpoint::load_file(path);                              // intact: loads
  write_garbage(path, file_bytes(path).size() / 3, 64 * 1024);  // inside the weights
  const std::string what = refusal(path);
  EXPECT_NE(what.find("kindling::handlers::Checkpoint: '" + path + "' ("), std::string::npos) << what;
  EXPECT_NE(what.find(" bytes) is damaged: the CRC-32 of '"), std::string::npos) << what;
  EXPECT_NE(what.find("not the 0x"), std::string::npos) << what;
  EXPECT_NE(what.find("resume from an earlier checkpoint"), std::string::npos) << what;
}

TEST(CheckpointResumeTest, GarbageOverAZipHeaderOrACutFileIsRefusedAsDamaged) {
  kindling::testing::TempDir dir("damaged");
  torch::nn::Linear model(1024, 512);
  const std::string good = file_bytes(save_linear_steps(dir.path(), model, 1));
  const std::size_t directory = good.rfind("PK\x01\x02", good.rfind("PK\x06\x06"));  // the last entry's
  ASSERT_NE(directory, std::string::npos);
  struct Case {
    std::string name;
    std::size_t offset, size;
    std::string says;
  };
  const std::vector<Case> cases{
      {"first-local-header", 0, 64, "is damaged: the local header of '"},
      {"central-directory", directory, 32, "is damaged: entry "},  // within the entry's 46-byte header
      {"end-record", good.size() - 40, 40, "is damaged: no end-of-archive record ends the file"},
  };
  for (const Case& c : cases) {
    const std::string path = dir.path() + "/" + c.name + ".pt";
    std::ofstream(path, std::ios::binary) << good;
    write_garbage(path, c.offset, c.size);
    const std::string what = refusal(path);
    EXPECT_NE(what.find("'" + path + "'"), std::string::npos) << what;
    EXPECT_NE(what.find(c.says), std::string::npos) << c.name << ": " << what;
    EXPECT_EQ(what.find("pickle LibTorch's reader cannot rebuild"), std::string::npos) << c.name << ": " << what;
  }
  const std::string cut = dir.path() + "/cut.pt";
  std::ofstream(cut, std::ios::binary) << good.substr(0, good.size() * 2 / 3);
  const std::string what = refusal(cut);
  EXPECT_NE(what.find("is damaged: no end-of-archive record ends the file, so it is an incomplete torch.save archive"),
            std::string::npos)
      << what;
}

// torch.save after torch.serialization.set_crc32_options(False) records a CRC-32 of 0: such
// a file loads (its records are still checked), as Python's torch.load reads it.
TEST(CheckpointResumeTest, AnArchiveWrittenWithoutCrcsStillLoads) {
  kindling::testing::TempDir dir("damaged");
  torch::nn::Linear model(1024, 512);
  const std::string path = save_linear_steps(dir.path(), model, 1);
  std::string bytes = file_bytes(path);
  const std::size_t end64 = bytes.rfind("PK\x06\x06");
  ASSERT_NE(end64, std::string::npos);
  std::size_t directory = 0;  // the zip64 end record's 8-byte offset of the central directory
  for (int i = 7; i >= 0; --i) directory = (directory << 8) | static_cast<unsigned char>(bytes[end64 + 48 + i]);
  int zeroed = 0;
  for (auto at = bytes.find("PK\x01\x02", directory); at < end64; at = bytes.find("PK\x01\x02", at + 4), ++zeroed)
    bytes.replace(at + 16, 4, 4, '\0');
  EXPECT_GT(zeroed, 3);
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  torch::nn::Linear other(1024, 512);
  kh::Checkpoint::load_objects({{"model", kh::stateful(other)}}, kh::Checkpoint::load_file(path), false);
  EXPECT_TRUE(at::equal(other->weight, model->weight));
}

TEST(CheckpointResumeTest, AResumeFallsBackToThePreviousIntactCheckpointWithAWarning) {
  kindling::testing::TempDir dir("damaged");
  torch::nn::Linear model(1024, 512);
  const std::string newest = save_linear_steps(dir.path(), model, 3);
  const std::string previous = dir.path() + "/training_checkpoint_2.pt";
  ASSERT_EQ(kh::Checkpoint::find_latest(dir.path(), "training"), newest);
  EXPECT_EQ(kh::Checkpoint::find_latest_intact(dir.path(), "training"), newest);
  write_garbage(newest, file_bytes(newest).size() / 4, 1 << 20);  // 1 MiB inside the weights
  ::testing::internal::CaptureStderr();
  const auto chosen = kh::Checkpoint::find_latest_intact(dir.path(), "training");
  const std::string warned = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(chosen, previous);
  EXPECT_NE(warned.find("resuming from '" + previous + "', the newest intact checkpoint; skipped as damaged: '" +
                        newest + "' (the CRC-32 of "),
            std::string::npos)
      << warned;
  EXPECT_EQ(kh::Checkpoint::load_file(*chosen).at("trainer").toGenericDict().at("iteration").toInt(), 2);

  // Every one damaged: nothing to resume from, and the files stay.
  write_garbage(previous, 0, 64);
  write_garbage(dir.path() + "/training_checkpoint_1.pt", 0, 64);
  const std::string all = kindling::testing::error_of<kh::DamagedCheckpointError>(
      [&] { kh::Checkpoint::find_latest_intact(dir.path(), "training"); });
  EXPECT_NE(all.find("every checkpoint in '" + dir.path() + "' is damaged: '"), std::string::npos) << all;
  EXPECT_NE(all.find(newest + "' (the CRC-32 of"), std::string::npos) << all;
  EXPECT_NE(all.find(previous + "' (the local header of"), std::string::npos) << all;
  EXPECT_NE(all.find("training_checkpoint_1.pt' (the local header of"), std::string::npos) << all;
  EXPECT_EQ(kindling::testing::files_in(dir.path()).size(), 3u);
  EXPECT_EQ(kh::Checkpoint::find_latest_intact(dir.path() + "/absent", "training"), std::nullopt);
}

}  // namespace
