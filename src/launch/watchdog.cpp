#include "launch/watchdog.h"

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <mutex>
#include <thread>

#include "kindling/dist/launch_env.h"
#include "kindling/error.h"
#include "kindling/log.h"

namespace kindling {
namespace detail {

std::chrono::milliseconds watchdog_limit(std::chrono::milliseconds timeout) {
  return timeout + std::chrono::seconds(3) + timeout / 10;
}

struct Watchdog::State {
  std::mutex mutex;
  std::condition_variable changed;
  bool done = false;
  Verdict verdict;
  std::string step;
  std::chrono::milliseconds limit{0};
  std::chrono::steady_clock::time_point deadline;
  std::thread thread;
};

namespace {

// What `diagnose` says within 2 s, or why it said nothing. The diagnosis may block on the
// very engine that is stuck: its thread is then left behind, the process ends anyway.
std::string bounded_diagnosis(const std::function<std::string()>& diagnose) {
  if (!diagnose) return "";
  auto task = std::make_shared<std::packaged_task<std::string()>>(diagnose);
  auto answer = task->get_future();
  std::thread([task] { (*task)(); }).detach();
  if (answer.wait_for(std::chrono::seconds(2)) != std::future_status::ready) {
    return " Who is missing is unknown: asking, through the same engine, got no answer within 2 s either.";
  }
  try {
    return std::string(" ").append(answer.get());
  } catch (const std::exception& e) {
    return std::string(" Who is missing is unknown: ") + e.what() + ".";
  }
}

[[noreturn]] void end_blocked_process(const Watchdog::State& s, const std::string& diagnosis) {
  const auto& v = s.verdict;
  const TimeoutError error(rank_prefix() + v.what + ": " + s.step + " did not end within " +
                           std::to_string(s.limit.count()) + " ms. " + v.cause + diagnosis +
                           " This process ends now with exit code " + std::to_string(v.exit_code) +
                           " instead of hanging, so that the launcher stops the job.");
  log(LogLevel::kError, error.what());
  ::kindling::dist::record_error(error);
  std::fflush(nullptr);
  std::_Exit(v.exit_code);
}

// A step that cannot go on because `cause` (what poll() said) already decided it.
[[noreturn]] void end_decided_process(const Watchdog::State& s, const std::string& cause) {
  const auto& v = s.verdict;
  const CommunicationError error(rank_prefix() + v.what + ": stopped while " + s.step + ": " + cause +
                                 ". This process ends now with exit code " + std::to_string(v.exit_code) + ".");
  log(LogLevel::kError, error.what());
  ::kindling::dist::record_error(error);
  std::fflush(nullptr);
  // This process may host the store the others read the cause from: give their next look
  // (every half second) the time to find it before the store goes.
  std::this_thread::sleep_for(std::chrono::seconds(1));
  std::_Exit(v.exit_code);
}

// Runs a Verdict's poll on a thread of its own, one call at a time, so that a poll blocked on
// a store it cannot reach (a cut link) never holds the watchdog, which must still end the
// process at its deadline. A blocked call is left behind, as bounded_diagnosis leaves one.
class Poller {
 public:
  explicit Poller(std::function<std::string()> poll) : poll_(std::move(poll)) {}

  // What the previous call found (empty while it runs or when it found nothing); starts the
  // next call when none runs.
  std::string next() {
    std::string cause;
    if (pending_.valid()) {
      if (pending_.wait_for(std::chrono::seconds(0)) != std::future_status::ready) return {};
      try {
        cause = pending_.get();
      } catch (const std::exception&) {
      }
      if (!cause.empty()) return cause;
    }
    auto task = std::make_shared<std::packaged_task<std::string()>>(poll_);
    pending_ = task->get_future();
    std::thread([task] { (*task)(); }).detach();
    return {};
  }

 private:
  std::function<std::string()> poll_;
  std::future<std::string> pending_;
};

void watch_steps(Watchdog::State& s) {
  constexpr auto kPollEvery = std::chrono::milliseconds(500);
  Poller poller(s.verdict.poll);
  const auto note_at = std::chrono::steady_clock::now() + s.verdict.note_after;
  bool noted = !s.verdict.note;
  const auto stood_down = [&s] { return s.verdict.stand_down && s.verdict.stand_down(); };
  std::unique_lock<std::mutex> lock(s.mutex);
  while (!s.done) {
    const auto now = std::chrono::steady_clock::now();
    auto wake = s.verdict.poll || s.verdict.stand_down ? std::min(s.deadline, now + kPollEvery) : s.deadline;
    if (!noted) wake = std::min(wake, note_at);
    s.changed.wait_until(lock, wake);
    if (s.done || stood_down()) break;
    if (std::chrono::steady_clock::now() >= s.deadline) {
      lock.unlock();
      end_blocked_process(s, bounded_diagnosis(s.verdict.diagnose));
    }
    if (!noted && std::chrono::steady_clock::now() >= note_at) {
      noted = true;
      const std::string step = s.step;
      lock.unlock();
      log(LogLevel::kWarning, rank_prefix() + s.verdict.what + ": still " + step + " after " +
                                  std::to_string(s.verdict.note_after.count() / 1000) + " s: " + s.verdict.note());
      lock.lock();
    }
    if (s.verdict.poll) {
      const std::string cause = poller.next();
      if (!cause.empty() && !stood_down()) end_decided_process(s, cause);
    }
  }
}

}  // namespace

Watchdog::Watchdog(Verdict verdict, std::string first_step, std::chrono::milliseconds limit)
    : state_(std::make_shared<State>()) {
  state_->verdict = std::move(verdict);
  state_->step = std::move(first_step);
  state_->limit = limit;
  state_->deadline = std::chrono::steady_clock::now() + limit;
  state_->thread = std::thread([s = state_] { watch_steps(*s); });
}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    state_->done = true;
  }
  state_->changed.notify_all();
  state_->thread.join();
}

void Watchdog::step(std::string description) {
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    state_->step = std::move(description);
    state_->deadline = std::chrono::steady_clock::now() + state_->limit;
  }
  state_->changed.notify_all();
}

}  // namespace detail
}  // namespace kindling
