// Starting a worker process (worker.h).
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "supervisor/process/signals.h"
#include "supervisor/process/worker.h"

extern char** environ;

namespace kindling {
namespace supervisor {
namespace {

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

// Runs in the forked child with every signal blocked (see start_worker).
[[noreturn]] void child_main(const WorkerSpec& spec, Prepared& prep, int out_fd, int err_fd, pid_t parent) {
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  for (int sig : kSupervisedSignals) ::sigaction(sig, &dfl, nullptr);
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

// "r/w": the worker's rank and its WORLD_SIZE (as the launcher gave it; "r" where it gave none).
std::string relayed_rank_tag(const WorkerSpec& spec) {
  std::string tag = std::to_string(spec.rank);
  for (const auto& kv : spec.env)
    if (kv.first == "WORLD_SIZE") tag = std::to_string(spec.rank) + "/" + kv.second;
  return tag;
}

}  // namespace

std::unique_ptr<Worker> start_worker(const WorkerSpec& spec, const SupervisorOptions& opt, pid_t supervisor) {
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
  // Workers whose lines this launcher tags with "[rank<r>]: " are told which rank of which
  // world it names (KINDLING_OUTPUT_RANK_PREFIXED=r/w), and kindling's log leaves out its own
  // "[rank r/w] " tag while the worker is still that rank of that world (common/log.cpp).
  if (opt.prefix_output) relayed.env.emplace_back("KINDLING_OUTPUT_RANK_PREFIXED", relayed_rank_tag(spec));
  Prepared prep = prepare(relayed);
  // Signals stay blocked across fork until the child has restored the default actions:
  // a SIGTERM that reached the child before that would run this launcher's handler in
  // the child, which writes to the shared signal pipe (this launcher would believe it
  // was told to stop, and the child would go on and exec its program regardless).
  sigset_t all, before;
  sigfillset(&all);
  ::sigprocmask(SIG_SETMASK, &all, &before);
  const pid_t pid = ::fork();
  if (pid == 0) child_main(relayed, prep, out[1], err[1], supervisor);
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
  return w;
}

void signal_group(Worker& w, int sig) {
  if (w.result.pid > 0) ::kill(-w.result.pid, sig);
  // A stopped (SIGSTOP, SIGTSTP) worker acts on SIGTERM only once continued; without this
  // it would always cost the whole grace period.
  if (w.result.pid > 0 && sig != SIGKILL && sig != SIGCONT) ::kill(-w.result.pid, SIGCONT);
}

}  // namespace supervisor
}  // namespace kindling
