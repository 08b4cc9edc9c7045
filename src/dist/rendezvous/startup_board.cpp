// The startup board (see startup_board.h): claims through compareSet, so that exactly one
// process holds each rank and the first world size stands; the failure key through
// compareSet too, so that the first cause stays.
#include "dist/rendezvous/startup_board.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <sstream>
#include <thread>
#include <vector>

#include "kindling/dist/launch_env.h"
#include "kindling/error.h"

namespace kindling {
namespace dist {
namespace detail {
namespace {

std::atomic<int> g_boards{0};  // worlds started in this process: one board each

std::vector<uint8_t> bytes(const std::string& s) { return std::vector<uint8_t>(s.begin(), s.end()); }
std::string text(const std::vector<uint8_t>& b) { return std::string(b.begin(), b.end()); }

// "<world size> <rank> <pid> <place>": one rank's claim, and its parts.
struct Claim {
  int world_size = 0;
  int rank = -1;
  long pid = 0;
  std::string place;
};

Claim parse_claim(const std::string& line) {
  Claim c;
  std::istringstream in(line);
  in >> c.world_size >> c.rank >> c.pid;
  std::getline(in >> std::ws, c.place);
  return c;
}

std::string host_of(const std::string& place) { return place.substr(0, place.find(' ')); }

}  // namespace

StartupBoard::StartupBoard(c10::intrusive_ptr<c10d::Store> store, c10::intrusive_ptr<c10d::Store> watch, int rank,
                           int world_size, std::string place, std::string origin)
    : store_(std::move(store)),
      watch_(std::move(watch)),
      rank_(rank),
      world_size_(world_size),
      place_(std::move(place)),
      origin_(std::move(origin)) {
  int restarts = 0;
  try {
    restarts = restart_count();
  } catch (const kindling::Error&) {
    // A malformed restart count is refused elsewhere; here it only names the keys.
  }
  generation_ = std::to_string(restarts) + "." + std::to_string(g_boards++);
}

std::string StartupBoard::key(const std::string& name) const { return "kindling/start/" + generation_ + "/" + name; }

void StartupBoard::claim() {
  const std::string mine =
      std::to_string(world_size_) + " " + std::to_string(rank_) + " " + std::to_string(::getpid()) + " " + place_;
  const std::string here = "rank " + std::to_string(rank_) + " on host " + host_of(place_);
  // The first claim of a rank number holds it; the first claim of all sets the world size.
  const Claim holder = parse_claim(text(store_->compareSet(key("rank/" + std::to_string(rank_)), {}, bytes(mine))));
  if (holder.pid != ::getpid() || holder.place != place_) {
    const std::string cause =
        here + " (pid " + std::to_string(::getpid()) + "): rank " + std::to_string(rank_) +
        " was started twice, here and on host " + host_of(holder.place) + " (pid " + std::to_string(holder.pid) +
        "). Two nodes were given the same node rank: give each node its own --node_rank from 0 to nnodes - 1 "
        "(or its own RANK / GROUP_RANK)";
    publish_failure(cause);
    throw UsageError("kindling::dist::initialize: " + cause);
  }
  const Claim first = parse_claim(text(store_->compareSet(key("world"), {}, bytes(mine))));
  if (first.world_size != world_size_) {
    const std::string cause =
        here + " was started for a world of " + std::to_string(world_size_) + " ranks, but rank " +
        std::to_string(first.rank) + " on host " + host_of(first.place) + " for a world of " +
        std::to_string(first.world_size) +
        ". Every node must be given the same --nnodes and --nproc_per_node (the same WORLD_SIZE on every rank)";
    publish_failure(cause);
    throw UsageError("kindling::dist::initialize: " + cause);
  }
}

void StartupBoard::publish_failure(const std::string& cause) {
  try {
    store_->compareSet(key("failure"), {}, bytes(cause));
  } catch (const std::exception&) {
    return;
  }
  std::this_thread::sleep_for(std::chrono::seconds(1));
}

std::string StartupBoard::watch() {
  if (!watch_) return {};
  std::lock_guard<std::mutex> lock(watch_mu_);
  try {
    const std::string k = key("failure");
    if (!watch_->check({k})) return {};
    return text(watch_->get(k));
  } catch (const std::exception&) {
    return {};
  }
}

}  // namespace detail
}  // namespace dist
}  // namespace kindling
