// Checkpoint across a resume: an earlier attempt's files count towards n_saved (by step and
// by score), a run that starts afresh leaves files it did not write, and every rank of a
// world decides alike (the saver's rank lists its folder for all).
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "kindling/dist/dist.h"
#include "kindling/engine/engine.h"
#include "kindling/handlers/checkpointing/checkpoint.h"
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

}  // namespace
