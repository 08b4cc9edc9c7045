#pragma once
// A real terminal for tests: runs a command in a detached tmux session and reads its screen.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace kindling {
namespace testing {

/// What `command` (a shell command) prints on stdout.
inline std::string output_of(const std::string& command) {
  std::string out;
  if (FILE* p = popen(command.c_str(), "r")) {
    char buf[4096];
    std::size_t n;
    while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
    pclose(p);
  }
  return out;
}

/// Runs `command` on a `width` x `height` terminal (tmux, its own server) until `marker`
/// shows on the screen or `limit` passes, and returns the screen's text. The session is
/// removed in any case.
inline std::string screen_of(const std::string& command, const std::string& marker, int width = 120,
                             int height = 12, std::chrono::seconds limit = std::chrono::seconds(60)) {
  // A server of its own per call: a server being killed by the previous call could
  // otherwise take this call's session down with it.
  static int calls = 0;
  const std::string socket = "kindling-test-" + std::to_string(::getpid()) + "-" + std::to_string(++calls);
  const std::string tmux = "tmux -L " + socket + " -f /dev/null ";
  output_of(tmux + "new-session -d -x " + std::to_string(width) + " -y " + std::to_string(height) + " -s t \"" +
            command + "; sleep 600\" 2>&1");
  std::string screen;
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (screen.find(marker) == std::string::npos && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    screen = output_of(tmux + "capture-pane -p -t t 2>&1");
  }
  output_of(tmux + "kill-server 2>&1");
  return screen;
}

/// The screen's lines that are not empty.
inline std::vector<std::string> shown_lines(const std::string& screen) {
  std::istringstream lines(screen);
  std::vector<std::string> shown;
  for (std::string l; std::getline(lines, l);) {
    if (!l.empty()) shown.push_back(l);
  }
  return shown;
}

/// The path of this test executable.
inline std::string self_path() {
  char self[4096];
  const ssize_t len = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
  return len > 0 ? std::string(self, static_cast<std::size_t>(len)) : std::string();
}

}  // namespace testing
}  // namespace kindling
