// A progress bar on rank 0 under kindling-run and Parallel, run in a real terminal (tmux):
// the launcher relays the redraws as they come, so each epoch leaves one line on the
// screen, as when ignite's children write to the terminal themselves.
#include <gtest/gtest.h>
#include <kindling/kindling.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "support/multiprocess.h"
#include "support/terminal.h"

namespace kd = kindling::dist;
namespace kh = kindling::handlers;
using kindling::engine::Engine;
using kindling::engine::Value;

namespace {

// Two epochs of 8 iterations with a persisting bar (rank 0 draws), then a marker. Without a
// terminal the bar would print a line every 2 iterations.
int train_two_epochs_with_a_bar() {
  Engine trainer([](Engine& e, const int&) -> Value {
    std::this_thread::sleep_for(std::chrono::milliseconds(40));
    return 1.0 / static_cast<double>(e.state().iteration);
  });
  std::make_shared<kh::ProgressBar>(kh::ProgressBarOptions().persist(true).ascii(true).every(2))
      ->attach(trainer, {}, [](const Value& out) { return std::map<std::string, double>{{"loss", out.number()}}; });
  std::vector<int> data(8, 0);
  trainer.run(data, 2);
  kd::barrier();
  if (kd::get_rank() == 0) std::fprintf(stderr, "DEMO-EXIT\n");
  return 0;
}

// The screen holds the two finished epochs' lines, each redrawn in place (and prefixed with
// the rank by kindling-run), then the marker.
void expect_two_bar_lines(const std::string& screen, const std::string& prefix) {
  ASSERT_NE(screen.find("DEMO-EXIT"), std::string::npos) << screen;
  std::vector<std::string> bars;
  for (const auto& l : kindling::testing::shown_lines(screen)) {
    if (l.find("Epoch [") != std::string::npos) bars.push_back(l);
  }
  ASSERT_EQ(bars.size(), 2u) << screen;
  EXPECT_EQ(bars[0].rfind(prefix + "Epoch [1/2]: [8/8] 100%|##########| loss=0.125 [", 0), 0u) << screen;
  EXPECT_EQ(bars[1].rfind(prefix + "Epoch [2/2]: [8/8] 100%|##########| loss=0.0625 [", 0), 0u) << screen;
  EXPECT_NE(screen.find(prefix + "DEMO-EXIT"), std::string::npos) << screen;
}

}  // namespace

KINDLING_WORKER(bar_under_kindling_run) {
  kd::initialize("gloo");
  train_two_epochs_with_a_bar();
  kd::finalize();
}

KINDLING_WORKER(bar_under_parallel) {
  kd::Parallel(kd::ParallelOptions("gloo").nproc_per_node(2)).run([](int) { train_two_epochs_with_a_bar(); });
}

TEST(TerminalRelay, KindlingRunRelaysTheBarsRedrawsToItsTerminal) {
  expect_two_bar_lines(kindling::testing::screen_of(std::string(KINDLING_RUN_PATH) +
                                                        " --standalone --nproc_per_node 2 " +
                                                        kindling::testing::self_path() +
                                                        " --kindling-worker=bar_under_kindling_run",
                                                    "DEMO-EXIT"),
                       "[rank0]: ");
}

TEST(TerminalRelay, ParallelRelaysTheBarsRedrawsToItsTerminal) {
  expect_two_bar_lines(kindling::testing::screen_of(
                           kindling::testing::self_path() + " --kindling-worker=bar_under_parallel", "DEMO-EXIT"),
                       "");
}
