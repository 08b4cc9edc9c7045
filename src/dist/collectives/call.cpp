// How one call of the API reaches the engine (call.h).
#include "dist/collectives/call.h"

#include "kindling/dist/live.h"

#include <ATen/ATen.h>

#include <sstream>
#include <string>

#include "dist/diagnostics/flight_dump.h"
#include "common/env.h"
#include "dist/rendezvous/peers.h"
#include "supervisor/agent/live_channel.h"

namespace kindling {
namespace dist {
namespace detail {
using ::kindling::detail::rank_prefix;

namespace {
// Records the first failure (see Runtime::broken), writes the flight record then, and
// returns `message`.
const std::string& mark_broken(const std::string& message) {
  auto& rt = runtime();
  bool first = false;
  {
    std::lock_guard<std::mutex> lock(rt.mu);
    first = !rt.broken.exchange(true);
    if (first) rt.broken_reason = message;
  }
  if (first) flight_dump_after_failure(message);
  return message;
}
}  // namespace

void check_usable(const char* name) {
  auto& rt = runtime();
  if (!rt.broken.load()) return;
  std::lock_guard<std::mutex> lock(rt.mu);
  throw CommunicationError(rank_prefix() + "kindling::dist::" + name +
                           ": an earlier collective failed, so the process group cannot be used any more (" +
                           rt.broken_reason.substr(0, 300) + (rt.broken_reason.size() > 300 ? "..." : "") +
                           "). Let the error end the process, or finalize() and initialize() again");
}

[[noreturn]] void translate(const std::exception& e, const GroupState& g, const char* name, int64_t seq) {
  auto& rt = runtime();
  const std::string engine_msg = engine_message(e);
  const std::string where = rank_prefix() + "kindling::dist::" + name + " on the " + g.label() + " (collective #" +
                            std::to_string(seq) + " of this rank on it)";
  if (dynamic_cast<const EngineTimeout*>(&e) != nullptr) {
    std::string diagnosis =
        rt.monitor ? rt.monitor->diagnose(g, seq, name)
                   : std::string("no progress information (the ") + rt.backend_name + " backend has no shared store)";
    throw TimeoutError(mark_broken(where + " timed out after " + std::to_string(g.timeout.count()) + " ms; " +
                                   diagnosis +
                                   ". Every rank of the group must call the same collectives in the same order: look "
                                   "for a rank that skips this call or calls another one, or raise "
                                   "InitOptions::timeout if a rank is only slow. The " +
                                   rt.backend_name + " engine said: " + engine_msg + [&] {
                                     const std::string at = ranks_behind_addresses(engine_msg);
                                     return at.empty() ? std::string() : " (" + at + ")";
                                   }()));
  }
  // A peer that left normally (it called finalize()) while this rank waited: the ranks do not
  // call the same collectives. Read from the store with a bound: it may be gone too.
  const std::string finished = rt.monitor ? rt.monitor->finished_peers(g, std::chrono::seconds(2)) : std::string();
  if (!finished.empty())
    throw CommunicationError(mark_broken(
        where + " cannot complete: " + finished + " while this rank waited in it. Every rank of the group must "
        "call the same collectives in the same order: look for a collective that only some ranks reach (a metric's "
        "compute() or a checkpoint called on one rank only, a loop that ends earlier on one rank). The " +
        rt.backend_name + " engine said: " + engine_msg));
  // Across hosts the engine names only an address; say whose it is.
  const std::string lost = ranks_behind_addresses(engine_msg);
  throw CommunicationError(mark_broken(
      where + " failed in the " + rt.backend_name + " engine: " + engine_msg +
      (lost.empty() ? " A peer process has probably exited or crashed: look at the other ranks' output for the "
                      "first error."
                    : " (" + lost +
                          "). That peer has probably exited, crashed, or lost its host or link: look at "
                          "its output for the first error.")));
}

std::chrono::milliseconds wait_timeout(const GroupState& g, bool p2p) {
  // Collectives carry the timeout into the engine, whose own message is more precise;
  // the wait gets some slack so that the engine normally reports first.
  if (p2p) return g.timeout;
  return g.timeout + std::min<std::chrono::milliseconds>(g.timeout, std::chrono::seconds(5));
}

int64_t enter(GroupState& g, const char* name, bool collective) {
  if (!collective) return g.seq.load(std::memory_order_relaxed);
  const int64_t seq = g.seq.fetch_add(1, std::memory_order_relaxed) + 1;
  g.op.store(name, std::memory_order_relaxed);
  return seq;
}

namespace {

// The error of a rank that gave up waiting in collective #seq because `stalled` (the
// monitor's verdict) names peers that stopped making progress.
std::string stall_error(const StallMonitor& monitor, const GroupState& g, const char* name, int64_t seq,
                        std::chrono::steady_clock::time_point start, const std::string& stalled) {
  const auto waited =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now() - start).count();
  std::ostringstream period;
  period << monitor.stall_period().count() / 1000.0;
  return mark_broken(rank_prefix() + "kindling::dist::" + name + " on the " + g.label() + " (collective #" +
                     std::to_string(seq) + " of this rank on it) gave up after " + std::to_string(waited) + " s: " +
                     stalled + ". A rank that makes no collective progress for the stall period (" + period.str() +
                     " s; InitOptions::stall_timeout or KINDLING_STALL_TIMEOUT) holds up the whole job, so "
                     "every waiting rank stops. If a rank is legitimately busy that long (a long evaluation or "
                     "checkpoint on one rank), raise the stall period; 0 turns the check off.");
}

// Ends the monitor's watch of a wait when the wait ends, however it ends.
struct EndWait {
  StallMonitor* monitor;
  bool* watching;
  ~EndWait() {
    if (*watching) monitor->end_wait();
  }
};

// c10d's gloo work can be waited on again after a wait that expired: wait in 1 s slices
// and ask the monitor between them. Under live recovery the slices are 100 ms: a rank whose
// collective waits on a lost peer without a connection of its own to it (a ring's far side)
// hears of the new round only between slices, and every survivor waits for the last one to
// arrive (a file read per slice costs microseconds).
void wait_in_slices(PendingOp& op, StallMonitor& monitor, GroupState& g, const char* name, int64_t seq, bool p2p,
                    std::chrono::milliseconds timeout) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  static const bool live = ::kindling::detail::get_env(supervisor::kLiveDirVariable).has_value();
  const auto slice = std::chrono::milliseconds(live ? 100 : 1000);
  bool watching = false;
  EndWait end_wait{&monitor, &watching};
  for (;;) {
    const auto left = timeout - std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
    try {
      op.wait(std::max(std::chrono::milliseconds(1), std::min(left, slice)));
      return;
    } catch (const std::exception&) {
      if (op.is_completed()) {  // it ended (maybe with the engine's error) just now
        op.wait(timeout);
        return;
      }
      if (left <= slice) throw;  // the whole timeout has passed
    }
    if (!watching) {
      monitor.begin_wait(g, seq, start);
      watching = true;
    }
    // Under live recovery the launcher announces a new round when a node is lost (whose peers may
    // wait on it for the whole timeout): leave this world now (kindling/dist/live.h).
    if (new_round_announced()) {
      throw CommunicationError(
          mark_broken(rank_prefix() + "kindling::dist::" + std::string(name) + " (collective #" + std::to_string(seq) +
                      ") left after " +
                      std::to_string(std::chrono::duration_cast<std::chrono::seconds>(Clock::now() - start).count()) +
                      " s: the launcher forms a new rendezvous round (a node was lost or joins); this "
                      "world ends (live recovery)"));
    }
    if (p2p) continue;
    const std::string stalled = monitor.verdict(g, seq, name);
    if (!stalled.empty()) throw TimeoutError(stall_error(monitor, g, name, seq, start, stalled));
  }
}

// Engines that wait in one piece (mpi) ask the monitor through a StallCheck instead.
void wait_watched(PendingOp& op, StallMonitor& monitor, GroupState& g, const char* name, int64_t seq,
                  std::chrono::milliseconds timeout) {
  const auto start = std::chrono::steady_clock::now();
  // Set by the checking thread; read here after the wait, which the engine orders after
  // its last check (the watchdog's disarm takes the same lock as its checks).
  bool watching = false;
  EndWait end_wait{&monitor, &watching};
  const StallCheck check = [&]() -> std::string {
    if (!watching) {
      monitor.begin_wait(g, seq, start);
      watching = true;
      return {};
    }
    const std::string stalled = monitor.verdict(g, seq, name);
    return stalled.empty() ? stalled : stall_error(monitor, g, name, seq, start, stalled);
  };
  op.wait_watched(timeout, check);
}

}  // namespace

void wait_op(PendingOp& op, GroupState& g, const char* name, int64_t seq, bool p2p) {
  const auto timeout = wait_timeout(g, p2p);
  check_usable(name);
  auto& rt = runtime();
  StallMonitor* monitor = rt.monitor.get();
  const StallWatch watch = rt.traits != nullptr ? rt.traits->stall_watch : StallWatch::kNone;
  if (monitor != nullptr && watch == StallWatch::kSlices)
    return wait_in_slices(op, *monitor, g, name, seq, p2p, timeout);
  // Point-to-point waits in one piece are not watched (as in slices, where a receive may
  // legitimately wait long for its sender).
  if (monitor != nullptr && watch == StallWatch::kInside && !p2p)
    return wait_watched(op, *monitor, g, name, seq, timeout);
  op.wait(timeout);
}

// The group's state when this rank takes part in a collective on it; null in the serial
// model or when this rank is not a member (idist then returns the input unchanged).
std::shared_ptr<GroupState> participant(const Group& group, const char* name) {
  auto g = resolve(group, name);
  if (g == nullptr || g->group_rank < 0 || g->comm == nullptr) return nullptr;
  return g;
}

Staged stage(const at::Tensor& t, const char* name, const char* what) {
  KINDLING_CHECK(t.defined(), "kindling::dist::", name, ": the ", what,
                 " is undefined (a default-constructed at::Tensor); pass a tensor with data");
  const auto dev = device();
  at::Tensor w = t;
  if (w.device() != dev) w = w.to(dev);
  if (!w.is_contiguous()) w = w.contiguous();
  return {w, !w.is_same(t)};
}

int member_index(const GroupState& g, int global, const char* name, const char* role) {
  const int idx = g.index_of(global);
  KINDLING_CHECK(
      idx >= 0, "kindling::dist::", name, ": ", role, " rank ", global, " is not a member of the ", g.label(),
      " (its ranks are ",
      [&] {
        std::string s;
        for (int r : g.ranks) {
          if (!s.empty()) s += ',';
          s += std::to_string(r);
        }
        return s;
      }(),
      "); ranks are global ranks");
  return idx;
}

void check_bitwise(ReduceOp op, at::ScalarType dtype, const char* name) {
  if (op != ReduceOp::kAnd && op != ReduceOp::kOr) return;
  KINDLING_CHECK(at::isIntegralType(dtype, /*includeBool=*/true), "kindling::dist::", name, ": ", to_string(op),
                 " is a bitwise reduction and needs an integral or bool tensor, got ", c10::toString(dtype),
                 "; use MIN (logical and of 0/1 values) or MAX (logical or) for floating-point data");
}

void check_in_place_tensor(const at::Tensor& t, const char* name) {
  KINDLING_CHECK(
      t.defined() && t.is_contiguous() && t.device() == device(), "kindling::dist::", name,
      ": the tensor must be defined, contiguous and on ", device().str(), " (got ",
      t.defined() ? t.device().str() + (t.is_contiguous() ? "" : ", non-contiguous") : std::string("undefined"),
      "); call .contiguous() / .to(kindling::dist::device()) first");
}

}  // namespace detail
}  // namespace dist
}  // namespace kindling
