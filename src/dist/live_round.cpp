// Live recovery, the worker's view of the launcher's rounds (see live_round.h).
#include "dist/live_round.h"

#include <condition_variable>
#include <cstdlib>
#include <optional>
#include <exception>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

#include "common/env.h"
#include "common/files.h"
#include "kindling/log.h"
#include "launch/entered_round.h"
#include "supervisor/agent/live_channel.h"

namespace kindling {
namespace dist {
namespace detail {

namespace {

using Clock = std::chrono::steady_clock;
using ::kindling::detail::get_env;
using ::kindling::detail::join_path;
using ::kindling::detail::Round;

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The round the launcher announced last in `folder` (-1: none).
int announced_round(const std::string& folder) {
  const std::string text = read_text(join_path(folder, supervisor::kLiveAnnounceFile));
  return text.empty() ? -1 : std::atoi(text.c_str());
}

// The launcher's round file (supervisor/live_channel.h): unset when not written yet.
std::optional<Round> read_round(const std::string& folder, const char* who) {
  const std::string text = read_text(join_path(folder, supervisor::kLiveRoundFile));
  if (text.empty()) return std::nullopt;
  Round round;
  const std::string wrong = ::kindling::detail::decode_round(text, round);
  KINDLING_CHECK(wrong.empty(), who, ": the launcher's round file ", join_path(folder, supervisor::kLiveRoundFile), ": ",
                 wrong, "; this kindling-run and this program come from different kindling versions");
  return round;
}

// A world being made on a thread of its own, and what became of it.
struct Making {
  std::mutex mu;
  std::condition_variable done_cv;
  bool done = false;
  bool given_up = false;
  std::unique_ptr<Backend> made;
  std::exception_ptr error;
};

// How long after a failure of the world being made a newer round's announcement still
// explains it: under live recovery the agents poll the rendezvous every 0.2 s (elastic_agent.cpp's
// kLivePoll, or keep_alive_interval if shorter), so the announcements of one round reach the
// nodes up to about that apart, more on a loaded host or after an agent's own rendezvous wait.
constexpr std::chrono::milliseconds kAnnouncementSpread{3000};

WorldGivenUp given_up(const BackendTraits& traits, int round, int announced) {
  return WorldGivenUp(round, announced,
                      ::kindling::detail::rank_prefix() + "kindling::dist::initialize(\"" + traits.name +
                          "\"): round " + std::to_string(round) + "'s world given up while waiting for its ranks: "
                          "the launcher announced round " + std::to_string(announced) +
                          " (a host was lost or arrived meanwhile)");
}

}  // namespace

int live_round() {
  if (const auto round = entered_round()) return round->round;
  return ::kindling::detail::get_env_int(::kindling::detail::kLiveRoundVariable).value_or(-1);
}

Round wait_for_round(int after, std::chrono::milliseconds timeout, const char* who) {
  const std::string folder = get_env(supervisor::kLiveDirVariable).value_or("");
  const auto deadline = Clock::now() + timeout;
  for (auto round = read_round(folder, who);; round = read_round(folder, who)) {
    if (round && round->round > after) return *round;
    KINDLING_CHECK_T(TimeoutError, Clock::now() < deadline, who, ": no new rendezvous round within ",
                     timeout.count() / 1000.0, " s after round ", after,
                     "; the launcher ends the job when its rendezvous fails (see its output)");
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

void say_taking_part(const std::string& folder) {
  static std::once_flag once;
  std::call_once(once, [&] { std::ofstream(join_path(folder, supervisor::kLiveTakingPartFile)); });
}

bool wait_as_standby(std::chrono::milliseconds timeout) {
  const std::string folder = get_env(supervisor::kLiveDirVariable).value_or("");
  if (folder.empty() || !get_env(supervisor::kLiveStandbyVariable) || entered_round()) return false;
  const int local_rank = ::kindling::detail::get_env_int("LOCAL_RANK").value_or(0);
  say_taking_part(folder);
  std::ofstream(join_path(folder, std::string(supervisor::kLiveStandbyFile) + "." + std::to_string(local_rank)));
  log(LogLevel::kInfo, "live recovery: started before its node joined (--warm_join); waiting for the round");
  enter_round(wait_for_round(-1, timeout, "kindling::dist::initialize"));
  return true;
}

void enter_round(const Round& round) {
  enter_round_record(round);
  const int local_rank = ::kindling::detail::get_env_int("LOCAL_RANK").value_or(0);
  log(LogLevel::kInfo, "live recovery: round " + std::to_string(round.round) + " (" + round.hosts + "): rank " +
                           std::to_string(round.rank_offset + local_rank) + " of " + std::to_string(round.world_size) +
                           " in the same process");
}

std::unique_ptr<Backend> make_backend(const BackendTraits& traits, WorldConfig config) {
  const std::string folder = get_env(supervisor::kLiveDirVariable).value_or("");
  if (folder.empty()) return traits.make(config);
  const int round = live_round();
  config.given_up = std::make_shared<std::atomic<bool>>(false);
  auto making = std::make_shared<Making>();
  // The engine's waits cannot be interrupted (the store's, gloo's connections to its peers):
  // they run on this thread, which is left behind if the world is given up. It keeps what it
  // uses; a backend it makes after that is never destroyed, as finalize() leaves a broken
  // engine (destroying it would wait on peers that are gone).
  std::thread([making, &traits, config] {
    std::unique_ptr<Backend> made;
    std::exception_ptr error;
    try {
      made = traits.make(config);
    } catch (...) {
      error = std::current_exception();
    }
    std::lock_guard<std::mutex> lock(making->mu);
    if (making->given_up) {
      (void)made.release();
      return;
    }
    making->made = std::move(made);
    making->error = error;
    making->done = true;
    making->done_cv.notify_all();
  }).detach();
  std::unique_lock<std::mutex> lock(making->mu);
  while (!making->done_cv.wait_for(lock, std::chrono::milliseconds(100), [&] { return making->done; })) {
    const int announced = announced_round(folder);
    if (announced <= round) continue;
    making->given_up = true;
    config.given_up->store(true);
    throw given_up(traits, round, announced);
  }
  if (!making->error) return std::move(making->made);
  // A rank that gives the world up first (the one that hosts its store, say) makes it fail
  // here before this node's agent has announced the newer round: the agents hear of it up to
  // a poll (a second) apart. The failure is this rank's own only if no newer round follows.
  lock.unlock();
  for (const auto until = Clock::now() + kAnnouncementSpread; Clock::now() < until;) {
    if (const int announced = announced_round(folder); announced > round) throw given_up(traits, round, announced);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  std::rethrow_exception(making->error);
}

void taking_newer_rounds(const std::function<void()>& initialize_once, std::chrono::milliseconds timeout) {
  constexpr char kWho[] = "kindling::dist::initialize";
  for (;;) {
    try {
      initialize_once();
      return;
    } catch (const WorldGivenUp& e) {
      log(LogLevel::kWarning, std::string(e.what()) + "; taking the newer round");
      enter_round(wait_for_round(e.round, timeout, kWho));
    }
  }
}

}  // namespace detail
}  // namespace dist
}  // namespace kindling
