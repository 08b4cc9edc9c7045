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
#include "support/multiprocess.h"

namespace {

namespace kh = kindling::handlers;
using kindling::engine::Engine;
using kindling::engine::Value;

void train_with_bar(kh::ProgressBarOptions options, int64_t sleep_ms) {
  Engine trainer([sleep_ms](Engine& e, const int& b) -> Value {
    std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms));
    return 1.0 / static_cast<double>(e.state().iteration);
  });
  kh::ProgressBar bar(options);
  bar.attach(trainer, {}, [](const Value& out) { return std::map<std::string, double>{{"loss", out.number()}}; });
  std::vector<int> data(8, 0);
  trainer.run(data, 2);
}

std::string run(const std::string& command) {
  std::string out;
  if (FILE* p = popen(command.c_str(), "r")) {
    char buf[4096];
    std::size_t n;
    while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
    pclose(p);
  }
  return out;
}

}  // namespace

KINDLING_WORKER(progress_bar_on_terminal) {
  train_with_bar(kh::ProgressBarOptions().persist(true).ascii(true), 40);
  std::fprintf(stderr, "DEMO-EXIT\n");
}

TEST(ProgressBarTest, RedrawsInPlaceOnARealTerminalAndPersists) {
  char self[4096];
  const ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
  ASSERT_GT(len, 0);
  self[len] = '\0';
  const std::string socket = "kindling-test-" + std::to_string(getpid());
  const std::string tmux = "tmux -L " + socket + " -f /dev/null ";
  run(tmux + "new-session -d -x 120 -y 12 -s bar \"" + std::string(self) +
      " --kindling-worker=progress_bar_on_terminal; sleep 60\" 2>&1");
  std::string screen;
  for (int i = 0; i < 300 && screen.find("DEMO-EXIT") == std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    screen = run(tmux + "capture-pane -p -t bar 2>&1");
  }
  run(tmux + "kill-server 2>&1");
  ASSERT_NE(screen.find("DEMO-EXIT"), std::string::npos) << screen;
  std::istringstream lines(screen);
  std::vector<std::string> shown;
  for (std::string l; std::getline(lines, l);) {
    if (!l.empty()) shown.push_back(l);
  }
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
  // Iterations 3 and 6 of epoch 1, then its end; 9, 12 and 15 (epoch 2's 1, 4, 7), then its end.
  EXPECT_EQ(prefixes, (std::vector<std::string>{"Epoch [1/2]: [3/8]", "Epoch [1/2]: [6/8]", "Epoch [1/2]: [8/8]",
                                                "Epoch [2/2]: [1/8]", "Epoch [2/2]: [4/8]", "Epoch [2/2]: [7/8]",
                                                "Epoch [2/2]: [8/8]"}))
      << text;
}
