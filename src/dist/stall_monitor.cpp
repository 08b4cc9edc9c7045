#include "dist/stall_monitor.h"

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <sstream>

namespace kindling {
namespace dist {
namespace detail {
namespace {
std::string progress_key(int group_id, int rank) {
  return "kindling/progress/" + std::to_string(group_id) + "/" + std::to_string(rank);
}
}  // namespace

StallMonitor::StallMonitor(c10::intrusive_ptr<c10d::Store> store, int rank) : store_(std::move(store)), rank_(rank) {
  thread_ = std::thread([this] { loop(); });
}

StallMonitor::~StallMonitor() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void StallMonitor::track(const std::shared_ptr<GroupState>& group) {
  std::lock_guard<std::mutex> lock(mu_);
  groups_.emplace_back(group, -1);
}

void StallMonitor::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    cv_.wait_for(lock, std::chrono::milliseconds(50));
    if (stop_) break;
    publish_changes();
  }
}

void StallMonitor::publish_changes() {
  for (auto& entry : groups_) {
    auto group = entry.first.lock();
    if (!group || group->group_rank < 0) continue;
    const int64_t seq = group->seq.load(std::memory_order_relaxed);
    if (seq == entry.second) continue;
    std::string value = std::to_string(seq) + " " + group->op.load(std::memory_order_relaxed);
    try {
      store_->set(progress_key(group->id, rank_), std::vector<uint8_t>(value.begin(), value.end()));
      entry.second = seq;
    } catch (const std::exception&) {
      // The store is gone (its host rank exited): stop publishing, diagnostics degrade.
      entry.second = seq;
    }
  }
}

std::string StallMonitor::diagnose(const GroupState& group, int64_t seq, const char* op) {
  std::ostringstream missing, elsewhere;
  int n_missing = 0, n_elsewhere = 0;
  try {
    for (int r : group.ranks) {
      if (r == rank_) continue;
      const std::string key = progress_key(group.id, r);
      int64_t peer_seq = 0;
      std::string peer_op = "(none)";
      if (store_->check({key})) {
        auto raw = store_->get(key);
        std::string text(raw.begin(), raw.end());
        auto space = text.find(' ');
        peer_seq = std::stoll(text.substr(0, space));
        if (space != std::string::npos) peer_op = text.substr(space + 1);
      }
      if (peer_seq < seq) {
        missing << (n_missing++ ? ", " : "") << r << " (its last collective on this group: "
                << (peer_seq == 0 ? std::string("none") : "#" + std::to_string(peer_seq) + " " + peer_op) << ")";
      } else if (peer_seq == seq && peer_op != op) {
        elsewhere << (n_elsewhere++ ? ", " : "") << r << " (it is in " << peer_op << " #" << peer_seq << ")";
      }
    }
  } catch (const std::exception& e) {
    return std::string("the other ranks' progress could not be read from the store (") + e.what() +
           "); a peer process probably exited";
  }
  std::ostringstream out;
  if (n_missing) out << "ranks that did not arrive: " << missing.str();
  if (n_elsewhere) out << (n_missing ? "; " : "") << "ranks in a different collective: " << elsewhere.str();
  if (!n_missing && !n_elsewhere)
    out << "every rank of the group entered this collective, so the engine itself stalled";
  return out.str();
}

}  // namespace detail
}  // namespace dist
}  // namespace kindling
