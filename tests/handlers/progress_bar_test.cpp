// ProgressBar: the screen of a real terminal (tmux) after two epochs, and the line-per-N
// output when the stream is not a terminal.
#include <gtest/gtest.h>

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "kindling/handlers/progress_bar.h"
#include "kindling/log.h"
#include "support/multiprocess.h"
#include "support/terminal.h"

namespace {

namespace kh = kindling::handlers;
using kindling::engine::Engine;
using kindling::engine::Value;

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
  std::rewind(f);
  std::string text;
  char buf[4096];
  std::size_t n;
  while ((n = fread(buf, 1, sizeof(buf), f)) > 0) text.append(buf, n);
  fclose(f);
  EXPECT_EQ(text.find('\r'), std::string::npos) << text;
  std::istringstream lines(text);
  std::vector<std::string> prefixes;
  for (std::string l; std::getline(lines, l);) prefixes.push_back(l.substr(0, l.find(']', l.find(']') + 1) + 1));
  // Counted within each epoch, as ignite: its iterations 3 and 6, then its end.
  EXPECT_EQ(prefixes, (std::vector<std::string>{"Epoch [1/2]: [3/8]", "Epoch [1/2]: [6/8]", "Epoch [1/2]: [8/8]",
                                                "Epoch [2/2]: [3/8]", "Epoch [2/2]: [6/8]", "Epoch [2/2]: [8/8]"}))
      << text;
}
