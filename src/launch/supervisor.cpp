// Worker supervision for kindling-run and Parallel (see supervisor.h).
#include "launch/supervisor.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <sstream>
#include <stdexcept>

extern char** environ;

namespace kindling {
namespace launch {

namespace {

using Clock = std::chrono::steady_clock;

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

// " from pid P (its command name)", for the received-signal message; empty when unknown.
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

// Installs the handlers for the life of one supervise() call and restores the old ones.
class SignalScope {
 public:
  SignalScope() {
    if (::pipe2(g_signal_pipe, O_CLOEXEC | O_NONBLOCK) != 0)
      throw std::runtime_error("pipe2 failed: " + std::string(std::strerror(errno)));
    struct sigaction sa {};
    sa.sa_sigaction = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART | SA_SIGINFO;
    for (int i = 0; i < kCount; ++i) ::sigaction(kSignals[i], &sa, &old_[i]);
  }
  ~SignalScope() {
    for (int i = 0; i < kCount; ++i) ::sigaction(kSignals[i], &old_[i], nullptr);
    ::close(g_signal_pipe[0]);
    ::close(g_signal_pipe[1]);
    g_signal_pipe[0] = g_signal_pipe[1] = -1;
  }
  int fd() const { return g_signal_pipe[0]; }

  static constexpr int kCount = 4;
  static constexpr int kSignals[kCount] = {SIGCHLD, SIGINT, SIGTERM, SIGHUP};

 private:
  struct sigaction old_[kCount];
};
constexpr int SignalScope::kSignals[];

struct Stream {
  int fd = -1;
  std::string partial;  // the current line so far
  bool is_err = false;
  // The launcher's own stream is a terminal: relay text as it comes, carriage returns
  // included, so that a worker's progress bar redraws its line in place.
  bool terminal = false;
  bool line_open = false;  // terminal relay: the current line's prefix is written
};

struct Worker {
  WorkerResult result;
  Stream out, err;
  bool running = false;
  bool term_sent = false;
  bool kill_sent = false;
  int order = -1;  // order in which it ended
};

void write_all(int fd, const std::string& text) {
  const char* p = text.data();
  std::size_t left = text.size();
  while (left > 0) {
    ssize_t n = ::write(fd, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      return;
    }
    p += n;
    left -= static_cast<std::size_t>(n);
  }
}

void keep_tail(Worker& w, Stream& s, const std::string& line, const SupervisorOptions& opt) {
  if (!s.is_err) return;
  w.result.stderr_tail.push_back(line);
  while (w.result.stderr_tail.size() > opt.tail_lines) w.result.stderr_tail.pop_front();
}

void emit_line(Worker& w, Stream& s, const std::string& line, const SupervisorOptions& opt) {
  std::string text = opt.prefix_output ? "[rank" + std::to_string(w.result.rank) + "]: " + line + "\n" : line + "\n";
  write_all(s.is_err ? STDERR_FILENO : STDOUT_FILENO, text);
  keep_tail(w, s, line, opt);
}

// Terminal relay (Stream::terminal): the rank prefix at the start of each line and after
// each carriage return ("\r[rank0]: Epoch [1/3]: [5/117] ..." redraws the line).
void relay_as_it_comes(Worker& w, Stream& s, const char* data, std::size_t n, const SupervisorOptions& opt) {
  const std::string prefix = opt.prefix_output ? "[rank" + std::to_string(w.result.rank) + "]: " : "";
  std::string text;
  for (std::size_t i = 0; i < n; ++i) {
    const char c = data[i];
    const bool ends_line = c == '\n' || c == '\r';
    if (!ends_line && !s.line_open) text += prefix;
    s.line_open = !ends_line;
    text += c;
    if (c == '\n') {
      keep_tail(w, s, s.partial, opt);
      s.partial.clear();
    } else if (c == '\r') {
      s.partial.clear();  // the line is drawn again
    } else {
      s.partial += c;
    }
  }
  write_all(s.is_err ? STDERR_FILENO : STDOUT_FILENO, text);
}

// Reads what is available; returns false at end of file.
bool pump(Worker& w, Stream& s, const SupervisorOptions& opt) {
  char buf[8192];
  while (true) {
    ssize_t n = ::read(s.fd, buf, sizeof(buf));
    if (n > 0 && s.terminal) {
      relay_as_it_comes(w, s, buf, static_cast<std::size_t>(n), opt);
      continue;
    }
    if (n > 0) {
      s.partial.append(buf, static_cast<std::size_t>(n));
      std::size_t start = 0, nl;
      while ((nl = s.partial.find('\n', start)) != std::string::npos) {
        emit_line(w, s, s.partial.substr(start, nl - start), opt);
        start = nl + 1;
      }
      s.partial.erase(0, start);
      continue;
    }
    if (n < 0 && (errno == EINTR)) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
    // EOF or error: flush an unterminated last line.
    if (s.terminal) {
      if (s.line_open) write_all(s.is_err ? STDERR_FILENO : STDOUT_FILENO, "\n");
      if (!s.partial.empty()) keep_tail(w, s, s.partial, opt);
    } else if (!s.partial.empty()) {
      emit_line(w, s, s.partial, opt);
    }
    s.partial.clear();
    ::close(s.fd);
    s.fd = -1;
    return false;
  }
}

// Everything the child needs, prepared before fork so that the child only makes
// async-signal-safe calls on the exec path.
struct Prepared {
  std::vector<std::string> env_strings;
  std::vector<char*> envp;
  std::vector<char*> argv;
};

Prepared prepare(const WorkerSpec& spec) {
  Prepared p;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string entry(*e);
    const std::string name = entry.substr(0, entry.find('='));
    bool replaced = false;
    for (const auto& kv : spec.env) replaced = replaced || kv.first == name;
    if (!replaced) p.env_strings.push_back(entry);
  }
  for (const auto& kv : spec.env) p.env_strings.push_back(kv.first + "=" + kv.second);
  for (auto& s : p.env_strings) p.envp.push_back(s.data());
  p.envp.push_back(nullptr);
  for (const auto& a : spec.argv) p.argv.push_back(const_cast<char*>(a.c_str()));
  p.argv.push_back(nullptr);
  return p;
}

// Runs in the forked child with every signal blocked (see supervise()).
[[noreturn]] void child_main(const WorkerSpec& spec, Prepared& prep, int out_fd, int err_fd, pid_t parent) {
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  for (int sig : SignalScope::kSignals) ::sigaction(sig, &dfl, nullptr);
  ::setpgid(0, 0);
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) ::_exit(125);  // the supervisor died before prctl
  ::dup2(out_fd, STDOUT_FILENO);
  ::dup2(err_fd, STDERR_FILENO);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  if (spec.entry) {
    for (const auto& kv : spec.env) ::setenv(kv.first.c_str(), kv.second.c_str(), 1);
    int rc = 1;
    try {
      rc = spec.entry();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "%s\n", e.what());
    } catch (...) {
      std::fprintf(stderr, "unknown exception\n");
    }
    std::fflush(stdout);
    std::fflush(stderr);
    ::_exit(rc);
  }
  ::execvpe(prep.argv[0], prep.argv.data(), prep.envp.data());
  const int err = errno;
  const char* what = std::strerror(err);
  const char* head = "cannot execute ";
  (void)!::write(STDERR_FILENO, head, std::strlen(head));
  (void)!::write(STDERR_FILENO, prep.argv[0], std::strlen(prep.argv[0]));
  (void)!::write(STDERR_FILENO, ": ", 2);
  (void)!::write(STDERR_FILENO, what, std::strlen(what));
  (void)!::write(STDERR_FILENO, "\n", 1);
  ::_exit(127);
}

void signal_group(Worker& w, int sig) {
  if (w.result.pid > 0) ::kill(-w.result.pid, sig);
  // A stopped (SIGSTOP, SIGTSTP) worker acts on SIGTERM only once continued; without this
  // it would always cost the whole grace period.
  if (w.result.pid > 0 && sig != SIGKILL && sig != SIGCONT) ::kill(-w.result.pid, SIGCONT);
}

std::string describe(const WorkerResult& r) {
  std::ostringstream out;
  if (r.exited) {
    out << "exited with code " << r.exit_code;
    if (r.exit_code == 127) out << " (the program could not be executed)";
  } else {
    out << "killed by " << signal_name(r.signal);
  }
  return out.str();
}

}  // namespace

SupervisorResult supervise(const std::vector<WorkerSpec>& specs, const SupervisorOptions& opt) {
  SignalScope signals;
  std::vector<std::unique_ptr<Worker>> workers;
  const pid_t self = ::getpid();
  std::fflush(stdout);
  std::fflush(stderr);
  int early_signal = 0;  // SIGINT / SIGTERM / SIGHUP received while workers were starting
  for (const auto& spec : specs) {
    unsigned char sigs[64];
    for (ssize_t got; early_signal == 0 && (got = ::read(signals.fd(), sigs, sizeof(sigs))) > 0;) {
      for (ssize_t k = 0; k < got; ++k)
        if (sigs[k] != SIGCHLD) early_signal = sigs[k];
    }
    if (early_signal != 0) break;  // start no more; the ones started are stopped below
    auto w = std::make_unique<Worker>();
    w->result.rank = spec.rank;
    w->result.local_rank = spec.local_rank;
    int out[2], err[2];
    if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0) {
      throw std::runtime_error(opt.name + ": cannot create pipes for rank " + std::to_string(spec.rank) + ": " +
                               std::strerror(errno));
    }
    // Workers whose output reaches a terminal through this launcher are told so
    // (KINDLING_STDOUT_TERMINAL / KINDLING_STDERR_TERMINAL), as a child that wrote to the
    // terminal itself would see it.
    WorkerSpec relayed = spec;
    w->out.terminal = ::isatty(STDOUT_FILENO) == 1;
    w->err.terminal = ::isatty(STDERR_FILENO) == 1;
    if (w->out.terminal) relayed.env.emplace_back("KINDLING_STDOUT_TERMINAL", "1");
    if (w->err.terminal) relayed.env.emplace_back("KINDLING_STDERR_TERMINAL", "1");
    Prepared prep = prepare(relayed);
    // Signals stay blocked across fork until the child has restored the default actions:
    // a SIGTERM that reached the child before that would run this launcher's handler in
    // the child, which writes to the shared signal pipe (this launcher would believe it
    // was told to stop, and the child would go on and exec its program regardless).
    sigset_t all, before;
    sigfillset(&all);
    ::sigprocmask(SIG_SETMASK, &all, &before);
    const pid_t pid = ::fork();
    if (pid == 0) child_main(relayed, prep, out[1], err[1], self);
    const int fork_errno = errno;
    ::sigprocmask(SIG_SETMASK, &before, nullptr);
    if (pid < 0)
      throw std::runtime_error(opt.name + ": fork failed for rank " + std::to_string(spec.rank) + ": " +
                               std::strerror(fork_errno));
    ::setpgid(pid, pid);
    ::close(out[1]);
    ::close(err[1]);
    ::fcntl(out[0], F_SETFL, O_NONBLOCK);
    ::fcntl(err[0], F_SETFL, O_NONBLOCK);
    w->out.fd = out[0];
    w->err.fd = err[0];
    w->err.is_err = true;
    w->result.pid = pid;
    w->running = true;
    workers.push_back(std::move(w));
  }

  SupervisorResult result;
  bool stopping = false;
  Clock::time_point kill_at{};
  Clock::time_point drain_until{};
  bool drain_started = false;
  int ended = 0;
  std::vector<int> failure_order;

  auto begin_stop = [&](int sig) {
    if (!stopping) {
      stopping = true;
      kill_at = Clock::now() + opt.grace_period;
    }
    for (auto& w : workers) {
      if (w->running && !w->term_sent) {
        w->term_sent = true;
        w->result.stopped = true;
        signal_group(*w, sig);
      }
    }
  };

  if (early_signal != 0) {
    result.received_signal = early_signal;
    result.signal_sender = signal_sender();
    begin_stop(early_signal);
  }

  while (true) {
    // Reap.
    for (std::size_t i = 0; i < workers.size(); ++i) {
      auto& w = *workers[i];
      if (!w.running) continue;
      int status = 0;
      pid_t r = ::waitpid(w.result.pid, &status, WNOHANG | WUNTRACED | WCONTINUED);
      if (r != w.result.pid) continue;
      if (WIFSTOPPED(status) || WIFCONTINUED(status)) {
        // A worker continued by our own SIGCONT (while stopping it) is still reported as frozen.
        if (WIFSTOPPED(status) || !w.term_sent) w.result.stop_signal = WIFSTOPPED(status) ? WSTOPSIG(status) : 0;
        continue;
      }
      w.running = false;
      w.order = ended++;
      if (WIFEXITED(status)) {
        w.result.exited = true;
        w.result.exit_code = WEXITSTATUS(status);
      } else if (WIFSIGNALED(status)) {
        w.result.signal = WTERMSIG(status);
      }
      // `stopped` is set only together with term_sent: a worker that failed before we
      // signalled it is a failure, one that ended after our signal was stopped by us.
      const bool bad = !w.result.exited || w.result.exit_code != 0;
      if (bad && !w.term_sent) {
        failure_order.push_back(static_cast<int>(i));
        begin_stop(SIGTERM);
      }
    }
    bool any_running = false, any_open = false;
    for (auto& w : workers) {
      any_running = any_running || w->running;
      any_open = any_open || w->out.fd >= 0 || w->err.fd >= 0;
    }
    const auto now = Clock::now();
    if (!any_running) {
      if (!any_open) break;
      // Grandchildren may hold the pipes; give them a moment, then stop reading.
      if (!drain_started) {
        drain_started = true;
        drain_until = now + std::chrono::milliseconds(500);
      } else if (now >= drain_until) {
        for (auto& w : workers) {
          for (Stream* s : {&w->out, &w->err}) {
            if (s->fd >= 0) {
              if (!s->partial.empty()) emit_line(*w, *s, s->partial, opt);
              ::close(s->fd);
              s->fd = -1;
            }
          }
        }
        break;
      }
    }
    if (stopping && now >= kill_at) {
      for (auto& w : workers) {
        if (w->running && !w->kill_sent) {
          w->kill_sent = true;
          signal_group(*w, SIGKILL);
        }
      }
    }

    std::vector<pollfd> fds;
    std::vector<std::pair<Worker*, Stream*>> owners;
    fds.push_back({signals.fd(), POLLIN, 0});
    owners.push_back({nullptr, nullptr});
    for (auto& w : workers) {
      for (Stream* s : {&w->out, &w->err}) {
        if (s->fd >= 0) {
          fds.push_back({s->fd, POLLIN, 0});
          owners.push_back({w.get(), s});
        }
      }
    }
    int n = ::poll(fds.data(), fds.size(), 100);
    if (n < 0 && errno != EINTR) throw std::runtime_error(opt.name + ": poll failed: " + std::strerror(errno));
    if (n <= 0) continue;
    if (fds[0].revents & POLLIN) {
      unsigned char sigs[64];
      ssize_t got;
      while ((got = ::read(signals.fd(), sigs, sizeof(sigs))) > 0) {
        for (ssize_t k = 0; k < got; ++k) {
          const int sig = sigs[k];
          if (sig == SIGCHLD) continue;
          if (result.received_signal != 0) {
            // Second request: no more patience.
            for (auto& w : workers) {
              if (w->running) {
                w->kill_sent = true;
                signal_group(*w, SIGKILL);
              }
            }
          }
          result.received_signal = sig;
          result.signal_sender = signal_sender();
          begin_stop(sig);
        }
      }
    }
    for (std::size_t k = 1; k < fds.size(); ++k) {
      if (fds[k].revents & (POLLIN | POLLHUP | POLLERR)) pump(*owners[k].first, *owners[k].second, opt);
    }
  }

  // Nothing a failed job started may outlive it.
  if (!failure_order.empty() || result.received_signal != 0) {
    for (auto& w : workers) ::kill(-w->result.pid, SIGKILL);
  }

  for (auto& w : workers) result.workers.push_back(w->result);
  if (result.received_signal != 0) {
    result.exit_code = 128 + result.received_signal;
  } else if (!failure_order.empty()) {
    const auto& first = workers[static_cast<std::size_t>(failure_order.front())]->result;
    result.exit_code = first.exited ? first.exit_code : 128 + first.signal;
    if (result.exit_code == 0) result.exit_code = 1;
  }
  if (!failure_order.empty() || result.received_signal != 0) {
    std::ostringstream s;
    if (result.received_signal != 0) {
      s << opt.name << ": received " << signal_name(result.received_signal) << result.signal_sender
        << "; forwarded it to the "
        << workers.size() << " workers\n";
    }
    if (!failure_order.empty()) {
      s << opt.name << ": " << failure_order.size() << " of " << workers.size() << " workers failed:\n";
      for (int idx : failure_order) {
        const auto& r = workers[static_cast<std::size_t>(idx)]->result;
        s << "  rank " << r.rank << " (local rank " << r.local_rank << ", pid " << r.pid << ") " << describe(r) << "\n";
        if (r.stderr_tail.empty()) {
          s << "    (no stderr output)\n";
        } else {
          s << "    last stderr lines:\n";
          for (const auto& line : r.stderr_tail) s << "      " << line << "\n";
        }
      }
    }
    std::vector<int> stopped;
    for (auto& w : workers) {
      if (w->result.stopped) stopped.push_back(w->result.rank);
      if (w->result.stop_signal != 0) {
        s << "  rank " << w->result.rank << " (pid " << w->result.pid << ") was stopped by "
          << signal_name(w->result.stop_signal) << " (frozen, not running) when the job ended\n";
      }
    }
    if (!stopped.empty()) {
      s << "  stopped rank" << (stopped.size() > 1 ? "s" : "");
      for (std::size_t k = 0; k < stopped.size(); ++k) s << (k ? ", " : " ") << stopped[k];
      s << " (SIGTERM, then SIGKILL after " << opt.grace_period.count() << " ms)\n";
    }
    result.summary = s.str();
  }
  return result;
}

}  // namespace launch
}  // namespace kindling
