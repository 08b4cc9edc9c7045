// ProgressBar: the screen of a real terminal (tmux) after two epochs, the line-per-N
// output when the stream is not a terminal, and log_message on stdout.
#include <gtest/gtest.h>

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "kindling/handlers/common.h"
#include "kindling/handlers/loggers/progress_bar.h"
#include "kindling/log.h"
#include "support/multiprocess.h"
#include "support/terminal.h"

namespace {

namespace kh = kindling::handlers;
using kindling::engine::Engine;
using kindling::engine::Value;

// The lines' "Epoch [e/n]: [i/len]" parts.
std::vector<std::string> line_prefixes(const std::string& text) {
  std::istringstream lines(text);
  std::vector<std::string> prefixes;
  for (std::string l; std::getline(lines, l);) {
    if (l.rfind("Epoch [", 0) == 0) prefixes.push_back(l.substr(0, l.find(']', l.find(']') + 1) + 1));
  }
  return prefixes;
}

std::string read_all(FILE* f) {
  std::rewind(f);
  std::string text;
  char buf[4096];
  std::size_t n;
  while ((n = fread(buf, 1, sizeof(buf), f)) > 0) text.append(buf, n);
  return text;
}

void train_with_bar(kh::ProgressBarOptions options, int64_t sleep_ms) {
  Engine trainer([sleep_ms](Engine& e, const int& b) -> Value {
    std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms));
    return 1.0 / static_cast<double>(e.state().iteration);
  });
  // Attached from a helper whose variable is gone when the engine runs: the engine keeps it.
  std::make_shared<kh::ProgressBar>(options)->attach(
      trainer, {}, [](const Value& out) { return std::map<std::string, double>{{"loss", out.number()}}; });
  std::vector<int> data(8, 0);
  trainer.run(data, 2);
}

}  // namespace

KINDLING_WORKER(progress_bar_on_terminal) {
  kindling::set_log_level(kindling::LogLevel::kWarning);  // the bar's lines only, not the engine's
  train_with_bar(kh::ProgressBarOptions().persist(true).ascii(true), 40);
  std::fprintf(stderr, "DEMO-EXIT\n");
}

TEST(ProgressBarTest, RedrawsInPlaceOnARealTerminalAndPersists) {
  const std::string screen = kindling::testing::screen_of(
      kindling::testing::self_path() + " --kindling-worker=progress_bar_on_terminal", "DEMO-EXIT");
  ASSERT_NE(screen.find("DEMO-EXIT"), std::string::npos) << screen;
  const std::vector<std::string> shown = kindling::testing::shown_lines(screen);
  // Exactly the two finished epochs' lines and the exit marker: every redraw happened in place.
  ASSERT_EQ(shown.size(), 3u) << screen;
  EXPECT_EQ(shown[0].rfind("Epoch [1/2]: [8/8] 100%|##########| loss=0.125 [", 0), 0u) << screen;
  EXPECT_EQ(shown[1].rfind("Epoch [2/2]: [8/8] 100%|##########| loss=0.0625 [", 0), 0u) << screen;
  EXPECT_NE(shown[1].find("it/s]"), std::string::npos) << screen;
  EXPECT_EQ(shown[2], "DEMO-EXIT");
}

TEST(ProgressBarTest, WithoutATerminalPrintsALineEveryNIterations) {
  FILE* f = tmpfile();
  ASSERT_NE(f, nullptr);
  train_with_bar(kh::ProgressBarOptions().stream(f).terminal(false).every(3).ascii(true), 0);
  const std::string text = read_all(f);
  fclose(f);
  EXPECT_EQ(text.find('\r'), std::string::npos) << text;
  // Counted within each epoch, as ignite: its iterations 3 and 6, then its end.
  EXPECT_EQ(line_prefixes(text), (std::vector<std::string>{"Epoch [1/2]: [3/8]", "Epoch [1/2]: [6/8]", "Epoch [1/2]: [8/8]",
                                                "Epoch [2/2]: [3/8]", "Epoch [2/2]: [6/8]", "Epoch [2/2]: [8/8]"}))
      << text;
}

// An update event with a filter of its own, counted over the whole run (8 iterations an
// epoch, every 3): a line in every epoch whenever the epoch's count passed a multiple of 3,
// not only in epoch 1 where the two counts meet.
TEST(ProgressBarTest, AFilteredUpdateEventStillPrintsInEveryEpoch) {
  FILE* f = tmpfile();
  ASSERT_NE(f, nullptr);
  Engine trainer([](Engine&, const int&) -> Value { return 0.5; });
  std::make_shared<kh::ProgressBar>(kh::ProgressBarOptions().stream(f).terminal(false).every(3).ascii(true))
      ->attach(trainer, {}, {}, kindling::engine::Events::ITERATION_COMPLETED.every(3));
  std::vector<int> data(8, 0);
  trainer.run(data, 3);
  const std::string text = read_all(f);
  fclose(f);
  // Updates at the run's iterations 3, 6 | 9, 12, 15 | 18, 21, 24 = the epochs' 3, 6 | 1, 4, 7 | 2, 5, 8.
  EXPECT_EQ(line_prefixes(text),
            (std::vector<std::string>{"Epoch [1/3]: [3/8]", "Epoch [1/3]: [6/8]", "Epoch [1/3]: [8/8]",
                                      "Epoch [2/3]: [4/8]", "Epoch [2/3]: [7/8]", "Epoch [2/3]: [8/8]",
                                      "Epoch [3/3]: [5/8]", "Epoch [3/3]: [8/8]"}))
      << text;
}

KINDLING_WORKER(progress_bar_of_common_handlers) {
  kindling::set_log_level(kindling::LogLevel::kWarning);
  Engine trainer([](Engine&, const int&) -> Value { return 0.5; });
  auto made = kh::setup_common_training_handlers(
      trainer, kh::CommonTrainingOptions().output_names({"loss"}).log_every_iters(3).stop_on_nan(false));
  std::vector<int> data(8, 0);
  trainer.run(data, 3);
}

// The main job's case (117 iterations an epoch, every 15) in small: setup_common_training_handlers
// with its output in a file prints the same lines in every epoch.
TEST(ProgressBarTest, CommonHandlersPrintEveryEpochInAFile) {
  kindling::testing::LaunchOptions options;
  options.world_size = 1;
  options.set_dist_env = false;
  options.env["KINDLING_STDERR_TERMINAL"] = "";  // a pipe, not a relayed terminal
  const auto results = kindling::testing::run_workers("progress_bar_of_common_handlers", options);
  ASSERT_EQ(results.size(), 1u);
  ASSERT_TRUE(results[0].ok()) << kindling::testing::describe(results);
  std::vector<std::string> expected;
  for (int e = 1; e <= 3; ++e) {
    for (const char* at : {"3/8", "6/8", "8/8"}) expected.push_back("Epoch [" + std::to_string(e) + "/3]: [" + at + "]");
  }
  EXPECT_EQ(line_prefixes(results[0].err), expected) << results[0].err;
}

// log_message is tqdm.write as ignite calls it: stdout, while the bar is on stderr.
KINDLING_WORKER(progress_bar_log_message) {
  kindling::set_log_level(kindling::LogLevel::kWarning);
  Engine trainer([](Engine&, const int&) -> Value { return 1.0; });
  auto bar = std::make_shared<kh::ProgressBar>(kh::ProgressBarOptions().terminal(false).ascii(true));
  bar->attach(trainer);
  trainer.on(kindling::engine::Events::EPOCH_COMPLETED,
             [bar](Engine& e) { bar->log_message("Validation Results - Epoch: " + std::to_string(e.state().epoch)); });
  std::vector<int> data(4, 0);
  trainer.run(data, 2);
}

TEST(ProgressBarTest, LogMessageWritesOnStdoutWhileTheBarIsOnStderr) {
  kindling::testing::LaunchOptions opts;
  opts.world_size = 1;
  const auto results = kindling::testing::run_workers("progress_bar_log_message", opts);
  ASSERT_EQ(results.size(), 1u);
  const auto& r = results[0];
  ASSERT_TRUE(r.ok()) << kindling::testing::describe(results);
  EXPECT_NE(r.out.find("Validation Results - Epoch: 1\nValidation Results - Epoch: 2\n"), std::string::npos) << r.out;
  EXPECT_EQ(r.err.find("Validation Results"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("Epoch [2/2]: [4/4]"), std::string::npos) << r.err;  // the bar stays on stderr
}
