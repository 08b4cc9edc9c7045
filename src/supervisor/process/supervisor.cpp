// Worker supervision for kindling-run and Parallel (see supervisor.h): start every worker,
// then one loop that reaps ended workers, stops the rest on the first failure or a signal
// (SIGTERM, SIGKILL after the grace period), and relays output, until every worker has
// ended and its output is drained; then the account of what failed.
#include "supervisor/process/supervisor.h"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <sstream>
#include <stdexcept>

#include "supervisor/process/flight_verdict.h"
#include "supervisor/process/signals.h"
#include "supervisor/process/worker.h"

namespace kindling {
namespace supervisor {

namespace {

using Clock = std::chrono::steady_clock;

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

class Supervision {
 public:
  explicit Supervision(const SupervisorOptions& opt) : opt_(opt) {}

  // Starts the workers in order, unless a stop request arrives first.
  void start(const std::vector<WorkerSpec>& specs) {
    const pid_t self = ::getpid();
    std::fflush(stdout);
    std::fflush(stderr);
    for (const auto& spec : specs) {
      const std::vector<int> requests = signals_.take_requests();
      if (!requests.empty()) {  // start no more; the ones started are stopped
        on_request(requests.back());
        return;
      }
      workers_.push_back(start_worker(spec, opt_, self));
    }
  }

  // Until every worker has ended and its output is drained.
  void run() {
    Clock::time_point next_check = Clock::now() + opt_.stop_check_every;
    while (true) {
      reap();
      if (finished()) return;
      if (stopping_ && Clock::now() >= kill_at_) kill_all();
      if (dumping_ && (Clock::now() >= dump_until_ || records_written())) {
        dumping_ = false;
        begin_stop(SIGTERM);
      }
      if (!stopping_ && !dumping_ && opt_.stop_check && Clock::now() >= next_check) {
        next_check = Clock::now() + opt_.stop_check_every;
        if (opt_.stop_check()) {  // another node's rank failed, or the membership changes
          result_.stopped_on_request = true;
          ask_for_records();
        }
      }
      wait_and_relay();
    }
  }

  SupervisorResult result() {
    // Nothing a failed job started may outlive it.
    if (!failure_order_.empty() || result_.received_signal != 0) {
      for (auto& w : workers_) ::kill(-w->result.pid, SIGKILL);
    }
    for (auto& w : workers_) result_.workers.push_back(w->result);
    if (result_.received_signal != 0) {
      result_.exit_code = 128 + result_.received_signal;
    } else if (!failure_order_.empty()) {
      const auto& first = workers_[static_cast<std::size_t>(failure_order_.front())]->result;
      result_.exit_code = first.exited ? first.exit_code : 128 + first.signal;
      if (result_.exit_code == 0) result_.exit_code = 1;
    }
    if (!failure_order_.empty() || result_.received_signal != 0) result_.summary = summary();
    return result_;
  }

 private:
  // SIGTERM (or the signal received) to every running worker not yet told; starts the grace.
  void begin_stop(int sig) {
    if (!stopping_) {
      stopping_ = true;
      kill_at_ = Clock::now() + opt_.grace_period;
    }
    for (auto& w : workers_) {
      if (w->running && !w->term_sent) {
        w->term_sent = true;
        w->result.stopped = true;
        signal_group(*w, sig);
      }
    }
  }

  // The first failure (here, or on another node when stop_check says so): the workers still
  // running that handle SIGUSR1 (kindling's flight recorder) are asked for their records, and
  // stopped when they have written them (or after flight_dump_wait); the others at once.
  void ask_for_records() {
    if (stopping_) return;
    asked_.clear();
    if (!opt_.flight_record_folder.empty() && opt_.flight_dump_wait.count() > 0) {
      timespec now{};
      ::clock_gettime(CLOCK_REALTIME, &now);
      asked_at_ns_ = static_cast<int64_t>(now.tv_sec) * 1000000000LL + now.tv_nsec;
      for (auto& w : workers_) {
        // A frozen worker (SIGSTOP) cannot write: not waited for.
        if (w->running && !w->term_sent && w->result.stop_signal == 0 && handles_sigusr1(w->result.pid) &&
            ::kill(w->result.pid, SIGUSR1) == 0)
          asked_.push_back(w.get());
      }
    }
    if (asked_.empty()) {
      begin_stop(SIGTERM);
      return;
    }
    dumping_ = true;
    dump_until_ = Clock::now() + opt_.flight_dump_wait;
  }

  bool records_written() const {
    for (const Worker* w : asked_)
      if (w->running && !flight_record_written(opt_.flight_record_folder, w->result.rank, asked_at_ns_)) return false;
    return true;
  }

  void kill_all() {
    for (auto& w : workers_) {
      if (w->running && !w->kill_sent) {
        w->kill_sent = true;
        signal_group(*w, SIGKILL);
      }
    }
  }

  // A stop request: forwarded; a second one kills at once.
  void on_request(int sig) {
    if (result_.received_signal != 0) kill_all();
    result_.received_signal = sig;
    result_.signal_sender = signal_sender();
    begin_stop(sig);
  }

  // Records the workers that ended; the first to fail before being told to stop stops the rest.
  void reap() {
    for (std::size_t i = 0; i < workers_.size(); ++i) {
      auto& w = *workers_[i];
      if (!w.running) continue;
      int status = 0;
      if (::waitpid(w.result.pid, &status, WNOHANG | WUNTRACED | WCONTINUED) != w.result.pid) continue;
      if (WIFSTOPPED(status) || WIFCONTINUED(status)) {
        // A worker continued by our own SIGCONT (while stopping it) is still reported as frozen.
        if (WIFSTOPPED(status) || !w.term_sent) w.result.stop_signal = WIFSTOPPED(status) ? WSTOPSIG(status) : 0;
        continue;
      }
      w.running = false;
      w.order = ended_++;
      if (WIFEXITED(status)) {
        w.result.exited = true;
        w.result.exit_code = WEXITSTATUS(status);
      } else if (WIFSIGNALED(status)) {
        w.result.signal = WTERMSIG(status);
      }
      // `stopped` is set only together with term_sent: a worker that failed before we
      // signalled it is a failure, one that ended after our signal was stopped by us. The
      // failures found in the first round that finds any lead; a later one follows them.
      const bool bad = !w.result.exited || w.result.exit_code != 0;
      if (bad && !w.term_sent) {
        if (failure_order_.empty() || !(dumping_ || stopping_)) {
          failure_order_.push_back(static_cast<int>(i));
        } else {
          w.failed_after_first = true;
        }
      }
    }
    if (!failure_order_.empty() && !dumping_) ask_for_records();
  }

  // Whether every worker has ended and its output is drained. Grandchildren may hold the
  // pipes after a worker ended: they get half a second, then the pipes are closed.
  bool finished() {
    bool any_running = false, any_open = false;
    for (auto& w : workers_) {
      any_running = any_running || w->running;
      any_open = any_open || w->out.fd >= 0 || w->err.fd >= 0;
    }
    if (any_running) return false;
    if (!any_open) return true;
    const auto now = Clock::now();
    if (!drain_started_) {
      drain_started_ = true;
      drain_until_ = now + std::chrono::milliseconds(500);
      return false;
    }
    if (now < drain_until_) return false;
    for (auto& w : workers_) close_streams(*w, opt_);
    return true;
  }

  // Waits up to 100 ms for output or a signal, then relays the one and acts on the other.
  void wait_and_relay() {
    std::vector<pollfd> fds{{signals_.fd(), POLLIN, 0}};
    std::vector<std::pair<Worker*, Stream*>> owners{{nullptr, nullptr}};
    for (auto& w : workers_) {
      for (Stream* s : {&w->out, &w->err}) {
        if (s->fd < 0) continue;
        fds.push_back({s->fd, POLLIN, 0});
        owners.push_back({w.get(), s});
      }
    }
    const int n = ::poll(fds.data(), fds.size(), 100);
    if (n < 0 && errno != EINTR) throw std::runtime_error(opt_.name + ": poll failed: " + std::strerror(errno));
    if (n <= 0) return;
    if (fds[0].revents & POLLIN) {
      for (int sig : signals_.take_requests()) on_request(sig);
    }
    for (std::size_t k = 1; k < fds.size(); ++k) {
      if (fds[k].revents & (POLLIN | POLLHUP | POLLERR)) pump(*owners[k].first, *owners[k].second, opt_);
    }
  }

  // The human-readable account of a signal and of the failures.
  std::string summary() const {
    std::ostringstream s;
    if (result_.received_signal != 0) {
      s << opt_.name << ": received " << signal_name(result_.received_signal) << result_.signal_sender
        << "; forwarded it to the " << workers_.size() << " workers\n";
    }
    // Workers that ended with an error of their own after the first failure, before or while
    // being stopped (a peer lost, most often): counted, named once, their output not repeated.
    std::vector<const WorkerResult*> after;
    for (auto& w : workers_) {
      if (w->failed_after_first || (w->result.stopped && w->result.exited && w->result.exit_code != 0))
        after.push_back(&w->result);
    }
    if (!failure_order_.empty()) {
      s << opt_.name << ": " << failure_order_.size() + after.size() << " of " << workers_.size()
        << " workers failed:\n";
      for (int idx : failure_order_) {
        const auto& r = workers_[static_cast<std::size_t>(idx)]->result;
        s << "  rank " << r.rank << " (local rank " << r.local_rank << ", pid " << r.pid << ") " << describe(r) << "\n";
        if (r.stderr_tail.empty()) {
          s << "    (no stderr output)\n";
        } else {
          s << "    last stderr lines:\n";
          for (const auto& line : r.stderr_tail) s << "      " << line << "\n";
        }
      }
      for (const WorkerResult* r : after) {
        s << "  rank " << r->rank << " (local rank " << r->local_rank << ", pid " << r->pid << ") " << describe(*r)
          << " after rank " << workers_[static_cast<std::size_t>(failure_order_.front())]->result.rank << "'s failure, "
          << (r->stopped ? "while being stopped" : "before being stopped") << " (its output is above)\n";
      }
    }
    std::vector<int> stopped;
    for (auto& w : workers_) {
      if (w->result.stopped) stopped.push_back(w->result.rank);
      if (w->result.stop_signal != 0) {
        s << "  rank " << w->result.rank << " (pid " << w->result.pid << ") was stopped by "
          << signal_name(w->result.stop_signal) << " (frozen, not running) when the job ended\n";
      }
    }
    if (!stopped.empty()) {
      s << "  stopped rank" << (stopped.size() > 1 ? "s" : "");
      for (std::size_t k = 0; k < stopped.size(); ++k) s << (k ? ", " : " ") << stopped[k];
      s << " (SIGTERM, then SIGKILL after " << opt_.grace_period.count() << " ms)\n";
    }
    return s.str();
  }

  const SupervisorOptions& opt_;
  SignalScope signals_;
  std::vector<std::unique_ptr<Worker>> workers_;
  SupervisorResult result_;
  std::vector<int> failure_order_;
  bool stopping_ = false;
  Clock::time_point kill_at_{};
  bool dumping_ = false;  // asked for flight records; stopping when they are in (ask_for_records)
  Clock::time_point dump_until_{};
  std::vector<Worker*> asked_;
  int64_t asked_at_ns_ = 0;
  bool drain_started_ = false;
  Clock::time_point drain_until_{};
  int ended_ = 0;
};

}  // namespace

SupervisorResult supervise(const std::vector<WorkerSpec>& specs, const SupervisorOptions& opt) {
  Supervision supervision(opt);
  supervision.start(specs);
  supervision.run();
  return supervision.result();
}

}  // namespace supervisor
}  // namespace kindling
