// Stall monitor (see stall_monitor.h).
#include "dist/diagnostics/stall_monitor.h"

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <algorithm>
#include <condition_variable>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>
#include <vector>

#include "common/env.h"
#include "dist/rendezvous/peers.h"
#include "kindling/error.h"

namespace kindling {
namespace dist {
namespace detail {

MonitorTarget Backend::monitor_target() { return {store(), -1, "the rendezvous store"}; }

namespace {
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

std::string progress_key(int group_id, int rank) {
  return "kindling/progress/" + std::to_string(group_id) + "/" + std::to_string(rank);
}

long long seconds_since(Clock::time_point t, Clock::time_point now) {
  return std::chrono::duration_cast<std::chrono::seconds>(now - t).count();
}

}  // namespace

struct StallMonitor::Shared {
  // What this rank last read of one peer's progress entry.
  struct PeerView {
    bool looked = false;  // this rank has tried to read the entry
    bool seen = false;    // an entry was read (a peer that never published has none)
    int64_t seq = 0;
    std::string op = "none";
    int64_t beat = -1;
    bool finished = false;  // its last entry says it called finalize()
    Clock::time_point seq_since{};   // when seq was first read at its current value
    Clock::time_point beat_since{};  // when beat was first read at its current value
  };

  struct Tracked {
    std::weak_ptr<GroupState> group;
    int64_t published = -1;
  };

  std::mutex mu;
  std::condition_variable cv;
  bool stop = false;
  bool exited = false;
  std::thread thread;

  c10::intrusive_ptr<c10d::Store> store;
  MonitorTarget target;
  int rank = 0;
  milliseconds stall{0};
  milliseconds beat_every{1000};
  milliseconds read_every{1000};

  std::vector<Tracked> groups;
  int64_t beat = 0;
  Clock::time_point next_beat{};

  // The collective this rank waits in, if any: its group's id and members.
  bool waiting = false;
  int waiting_group = 0;
  std::vector<int> waiting_ranks;
  int64_t waiting_seq = 0;
  Clock::time_point wait_since{};
  Clock::time_point next_read{};

  std::map<std::pair<int, int>, PeerView> peers;  // (group id, global rank)

  // Store health: an operation in flight, the last answer, or the last failure.
  bool io_busy = false;
  Clock::time_point io_answered{};  // when the store last answered (set at start)
  bool io_failing = false;
  Clock::time_point io_failing_since{};
  std::string io_error;

  // finish(): the entries are written once more, marked "finished", then never again.
  bool finishing = false;
  bool finished_written = false;
  // finished_peers(): a one-off read of every peer of one group.
  bool probe = false;
  int probe_group = 0;
  std::vector<int> probe_ranks;
  int64_t probes_done = 0;

  using Writes = std::vector<std::pair<std::string, std::string>>;
  using Reads = std::vector<std::pair<int, int>>;
  void due(Clock::time_point now, Writes& writes, Reads& reads);
  void record(const Reads& reads, const std::vector<std::pair<bool, std::string>>& values, const std::string& error);
  void loop();
  std::string describe_store() const {
    if (target.host_rank >= 0) return "the rendezvous store hosted by rank " + std::to_string(target.host_rank);
    return target.host;
  }
};

// What is due on the store now: this rank's entries to write (once more marked "finished"
// while finishing, none after), and the peers' entries to read (group id, global rank).
void StallMonitor::Shared::due(Clock::time_point now, Writes& writes, Reads& reads) {
  const bool beat_due = now >= next_beat;
  if (beat_due) {
    ++beat;
    next_beat = now + beat_every;
  }
  for (auto& t : groups) {
    auto g = t.group.lock();
    if (!g || g->group_rank < 0 || finished_written) continue;
    const int64_t seq = g->seq.load(std::memory_order_relaxed);
    if (seq == t.published && !beat_due && !finishing) continue;
    t.published = seq;
    writes.emplace_back(progress_key(g->id, rank), std::to_string(seq) + " " + g->op.load(std::memory_order_relaxed) +
                                                       " " + std::to_string(beat) + (finishing ? " finished" : ""));
  }
  if (waiting && now >= next_read) {
    next_read = now + read_every;
    for (int r : waiting_ranks)
      if (r != rank) reads.emplace_back(waiting_group, r);
  }
  if (probe)
    for (int r : probe_ranks)
      if (r != rank) reads.emplace_back(probe_group, r);
}

// Records what the reads returned (or the store's failure) in the peers' views.
void StallMonitor::Shared::record(const Reads& reads, const std::vector<std::pair<bool, std::string>>& values,
                                  const std::string& error) {
  const auto done = Clock::now();
  if (!error.empty()) {
    if (!io_failing) io_failing_since = done;
    io_failing = true;
    io_error = error;
    return;
  }
  io_failing = false;
  io_answered = done;
  for (std::size_t i = 0; i < reads.size(); ++i) {
    PeerView& v = peers[reads[i]];
    if (!values[i].first) {
      // No entry yet (the peer stopped before it first published): quiet since first looked at.
      if (!v.looked) v.seq_since = v.beat_since = done;
      v.looked = true;
      continue;
    }
    v.looked = true;
    std::istringstream in(values[i].second);
    int64_t seq = 0, beat_read = -1;
    std::string op, mark;
    in >> seq >> op >> beat_read >> mark;
    if (!v.seen || seq != v.seq) v.seq_since = done;
    if (!v.seen || beat_read != v.beat) v.beat_since = done;
    v.seen = true;
    v.seq = seq;
    v.op = op.empty() ? "none" : op;
    v.beat = beat_read;
    v.finished = mark == "finished";
  }
}

void StallMonitor::Shared::loop() {
  std::unique_lock<std::mutex> lock(mu);
  while (!stop) {
    cv.wait_for(lock, milliseconds(50));
    if (stop) break;
    Writes writes;
    Reads reads;
    due(Clock::now(), writes, reads);
    const bool probing = probe;
    const bool finishing_now = finishing && !finished_written;
    if (writes.empty() && reads.empty() && !probing && !finishing_now) continue;

    io_busy = true;
    lock.unlock();
    std::vector<std::pair<bool, std::string>> values(reads.size());  // (present, entry)
    std::string error;
    try {
      for (const auto& w : writes) store->set(w.first, std::vector<uint8_t>(w.second.begin(), w.second.end()));
      for (std::size_t i = 0; i < reads.size(); ++i) {
        const std::string key = progress_key(reads[i].first, reads[i].second);
        if (!store->check({key})) continue;
        auto raw = store->get(key);
        values[i] = {true, std::string(raw.begin(), raw.end())};
      }
    } catch (const std::exception& e) {
      error = engine_message(e);
    }
    lock.lock();
    io_busy = false;
    record(reads, values, error);
    if (finishing_now) finished_written = true;
    if (probing) {
      probe = false;
      ++probes_done;
    }
    cv.notify_all();
  }
  exited = true;
  cv.notify_all();
}

StallMonitor::StallMonitor(MonitorTarget target, int rank, milliseconds stall_period)
    : shared_(std::make_shared<Shared>()) {
  auto& s = *shared_;
  s.store = target.store;
  s.target = std::move(target);
  s.rank = rank;
  s.stall = stall_period;
  // A heartbeat a tenth of the stall period apart (1-5 s) keeps the "is it alive" answer
  // fresh without writing to the store all the time.
  if (stall_period.count() > 0) s.beat_every = std::clamp(stall_period / 10, milliseconds(1000), milliseconds(5000));
  s.read_every = stall_period.count() > 0 ? std::clamp(stall_period / 20, milliseconds(250), milliseconds(3000))
                                          : milliseconds(3000);
  s.io_answered = Clock::now();
  s.thread = std::thread([keep = shared_] { keep->loop(); });
}

StallMonitor::~StallMonitor() {
  std::unique_lock<std::mutex> lock(shared_->mu);
  shared_->stop = true;
  shared_->cv.notify_all();
  // A thread stuck in a read from a stopped store host cannot be interrupted: leave it
  // behind (it owns its state) rather than hang the process at finalize() or exit.
  const bool ended = shared_->cv.wait_for(lock, std::chrono::seconds(2), [&] { return shared_->exited; });
  lock.unlock();
  if (ended) {
    shared_->thread.join();
  } else {
    shared_->thread.detach();
  }
}

void StallMonitor::track(const std::shared_ptr<GroupState>& group) {
  std::lock_guard<std::mutex> lock(shared_->mu);
  shared_->groups.push_back({group, -1});
}

milliseconds StallMonitor::stall_period() const { return shared_->stall; }

void StallMonitor::begin_wait(const GroupState& group, int64_t seq, Clock::time_point since) {
  std::lock_guard<std::mutex> lock(shared_->mu);
  shared_->waiting = true;
  shared_->waiting_group = group.id;
  shared_->waiting_ranks = group.ranks;
  shared_->waiting_seq = seq;
  shared_->wait_since = since;
  shared_->next_read = Clock::now();
}

void StallMonitor::end_wait() {
  std::lock_guard<std::mutex> lock(shared_->mu);
  shared_->waiting = false;
}

std::string StallMonitor::verdict(const GroupState& group, int64_t seq, const char* op) {
  auto& s = *shared_;
  std::lock_guard<std::mutex> lock(s.mu);
  const auto now = Clock::now();
  if (s.stall.count() <= 0 || now - s.wait_since < s.stall) return {};
  std::ostringstream out;
  // Silence is counted from the store's last answer or the start of this wait, whichever is
  // later, not from when the pending request was sent: every waiting rank then reaches the
  // same verdict at about the same time, whichever request of its own happened to block.
  const auto silent_since = std::max(s.io_answered, s.wait_since);
  if (s.io_busy && now - silent_since >= s.stall) {
    const std::string quiet = std::to_string(seconds_since(silent_since, now));
    if (s.target.host_rank >= 0)
      return "stalled: rank " + std::to_string(s.target.host_rank) + on_host(s.target.host_rank) +
             " (it hosts the rendezvous store, which has " +
             "not answered for " + quiet + " s: its process is stopped, frozen or cut off)";
    return "stalled: " + s.target.host + " has not answered for " + quiet + " s (stopped, frozen or cut off)";
  }
  if (s.io_failing && now - s.io_failing_since >= s.stall) {
    return s.describe_store() + " cannot be read (" + s.io_error + ") for " +
           std::to_string(seconds_since(s.io_failing_since, now)) + " s, so its host probably exited";
  }
  int n = 0;
  for (int r : group.ranks) {
    if (r == s.rank) continue;
    auto it = s.peers.find({group.id, r});
    if (it == s.peers.end()) continue;
    const auto& v = it->second;
    const auto watched = [&](Clock::time_point t) { return now - std::max(t, s.wait_since); };
    const bool quiet = watched(v.seq_since) >= s.stall;
    // A frozen peer may hold up the others even inside the same collective (its engine
    // stops sending), so a lost heartbeat counts at any count.
    const bool frozen = watched(v.beat_since) >= s.stall;
    const bool behind = quiet && v.seq < seq;
    const bool other_op = quiet && v.seen && v.seq == seq && v.op != op;
    if (!behind && !other_op && !frozen) continue;
    out << (n++ ? "; " : "") << "rank " << r << on_host(r);
    if (v.finished) {
      out << " finished (it called finalize() after its collective #" << v.seq << " " << v.op
          << " on this group, so it will not take part in this one)";
      continue;
    }
    if (other_op && !frozen) {
      out << " is in " << v.op << " #" << v.seq << " (a different collective: the ranks call collectives in "
          << "different orders)";
      continue;
    }
    out << " (its last collective on this group: "
        << (v.seen && v.seq > 0 ? "#" + std::to_string(v.seq) + " " + v.op : std::string("none"));
    if (v.seq < seq) out << "; no progress for " << seconds_since(std::max(v.seq_since, s.wait_since), now) << " s";
    if (frozen) {
      out << "; its process does not answer (no heartbeat for "
          << seconds_since(std::max(v.beat_since, s.wait_since), now) << " s): stopped, frozen or cut off)";
    } else {
      out << "; its process is alive (heartbeat " << seconds_since(v.beat_since, now)
          << " s ago), so it is busy outside collectives or blocked in its own code)";
    }
  }
  if (n == 0) return {};
  return "stalled: " + out.str();
}

std::string StallMonitor::diagnose(const GroupState& group, int64_t seq, const char* op) {
  auto& s = *shared_;
  std::lock_guard<std::mutex> lock(s.mu);
  std::ostringstream missing, elsewhere;
  int n_missing = 0, n_elsewhere = 0, unknown = 0;
  for (int r : group.ranks) {
    if (r == s.rank) continue;
    auto it = s.peers.find({group.id, r});
    if (it == s.peers.end()) {
      ++unknown;
      continue;
    }
    const auto& v = it->second;
    if (v.seq < seq) {
      missing << (n_missing++ ? ", " : "") << r << on_host(r) << " (its last collective on this group: "
              << (v.seq == 0 ? std::string("none") : "#" + std::to_string(v.seq) + " " + v.op) << ")";
    } else if (v.seq == seq && v.op != op) {
      elsewhere << (n_elsewhere++ ? ", " : "") << r << on_host(r) << " (it is in " << v.op << " #" << v.seq << ")";
    }
  }
  std::ostringstream out;
  if (n_missing) out << "ranks that did not arrive: " << missing.str();
  if (n_elsewhere) out << (n_missing ? "; " : "") << "ranks in a different collective: " << elsewhere.str();
  if (!n_missing && !n_elsewhere) {
    if (unknown)
      out << "the other ranks' progress could not be read (" << (s.io_failing ? s.io_error : s.describe_store())
          << " did not answer)";
    else
      out << "every rank of the group entered this collective, so the engine itself stalled";
  }
  return out.str();
}

void StallMonitor::finish(milliseconds bound) {
  auto& s = *shared_;
  std::unique_lock<std::mutex> lock(s.mu);
  s.finishing = true;
  s.cv.notify_all();
  s.cv.wait_for(lock, bound, [&] { return s.finished_written || s.exited; });
}

std::string StallMonitor::finished_peers(const GroupState& group, milliseconds bound) {
  auto& s = *shared_;
  std::unique_lock<std::mutex> lock(s.mu);
  s.probe = true;
  s.probe_group = group.id;
  s.probe_ranks = group.ranks;
  const int64_t target = s.probes_done + 1;
  s.cv.notify_all();
  if (!s.cv.wait_for(lock, bound, [&] { return s.probes_done >= target || s.exited; })) return {};
  std::ostringstream out;
  int n = 0;
  for (int r : group.ranks) {
    auto it = s.peers.find({group.id, r});
    if (r == s.rank || it == s.peers.end() || !it->second.finished) continue;
    const auto& v = it->second;
    out << (n++ ? "; " : "") << "rank " << r << on_host(r) << " finished (it called finalize() after "
        << (v.seq > 0 ? "its collective #" + std::to_string(v.seq) + " " + v.op + " on this group"
                      : std::string("no collective on this group"))
        << ")";
  }
  return out.str();
}

milliseconds stall_period_from_env(milliseconds fallback) {
  auto text = ::kindling::detail::get_env("KINDLING_STALL_TIMEOUT");
  if (!text) return fallback;
  const auto seconds = ::kindling::detail::parse_seconds(*text);
  KINDLING_CHECK(seconds.has_value(), "KINDLING_STALL_TIMEOUT='", *text,
                 "' is not a number of seconds >= 0; set for example KINDLING_STALL_TIMEOUT=60 (0 turns stall "
                 "detection off)");
  return milliseconds(static_cast<int64_t>(*seconds * 1000));
}

}  // namespace detail
}  // namespace dist
}  // namespace kindling
