// The supervisor's signals through a self-pipe (signals.h).
#include "supervisor/process/signals.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <stdexcept>

namespace kindling {
namespace supervisor {
namespace {

int g_signal_pipe[2] = {-1, -1};
// The process that sent the last SIGINT / SIGTERM / SIGHUP (0: the kernel or unknown), so
// that the message can say who stopped the job.
volatile sig_atomic_t g_signal_sender = 0;

void on_signal(int sig, siginfo_t* info, void*) {
  const int saved = errno;
  if (sig != SIGCHLD && info != nullptr) g_signal_sender = info->si_pid;
  unsigned char byte = static_cast<unsigned char>(sig);
  if (g_signal_pipe[1] >= 0) (void)!::write(g_signal_pipe[1], &byte, 1);
  errno = saved;
}

}  // namespace

SignalScope::SignalScope() {
  if (::pipe2(g_signal_pipe, O_CLOEXEC | O_NONBLOCK) != 0)
    throw std::runtime_error("pipe2 failed: " + std::string(std::strerror(errno)));
  struct sigaction sa {};
  sa.sa_sigaction = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART | SA_SIGINFO;
  for (int i = 0; i < kSupervisedSignalCount; ++i) ::sigaction(kSupervisedSignals[i], &sa, &old_[i]);
}

SignalScope::~SignalScope() {
  for (int i = 0; i < kSupervisedSignalCount; ++i) ::sigaction(kSupervisedSignals[i], &old_[i], nullptr);
  ::close(g_signal_pipe[0]);
  ::close(g_signal_pipe[1]);
  g_signal_pipe[0] = g_signal_pipe[1] = -1;
}

int SignalScope::fd() const { return g_signal_pipe[0]; }

std::vector<int> SignalScope::take_requests() {
  std::vector<int> out;
  unsigned char sigs[64];
  for (ssize_t got; (got = ::read(fd(), sigs, sizeof(sigs))) > 0;) {
    for (ssize_t k = 0; k < got; ++k)
      if (sigs[k] != SIGCHLD) out.push_back(sigs[k]);
  }
  return out;
}

std::string signal_sender() {
  const pid_t pid = g_signal_sender;
  if (pid <= 0) return "";
  std::string name;
  if (FILE* f = std::fopen(("/proc/" + std::to_string(pid) + "/comm").c_str(), "r")) {
    char buf[64] = {0};
    if (std::fgets(buf, sizeof(buf), f)) name = buf;
    std::fclose(f);
  }
  while (!name.empty() && name.back() == '\n') name.pop_back();
  return " from pid " + std::to_string(pid) + (name.empty() ? " (no longer running)" : " (" + name + ")");
}

}  // namespace supervisor
}  // namespace kindling
