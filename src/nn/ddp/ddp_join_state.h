#pragma once
// What a live Join (kindling/nn/join.h, src/nn/ddp/ddp_join.cpp) changes in DistributedDataParallel's
// reducer (src/nn/ddp/ddp_state.h): whether one lives, how the averages are divided, and the count
// of ranks still training in the current step.
//
// Invariant: the count is the group's size when a Join starts and ends, and read only while one
// lives. Not thread-safe: the reducer calls it under its lock, except from Join::join's loop
// (the one thread that trains there).
#include <cstdint>
#include <optional>

namespace kindling {
namespace nn {
namespace detail {

class JoinState {
 public:
  // Whether a Join lives.
  bool joining() const { return joining_; }
  // A Join starts on a group of `world` ranks, all training.
  void enter(bool divide_by_initial_world, int world) {
    joining_ = true;
    divide_by_initial_world_ = divide_by_initial_world;
    active_ = world;
  }
  // The Join ends.
  void leave(int world) {
    joining_ = false;
    active_ = world;
  }
  // The ranks still training in this step (counted by each synchronised forward, or by the
  // joined ranks' loop).
  void set_active(int64_t active) { active_ = active; }
  // divide_by_initial_world_size(false) while some ranks joined: the factor that turns the
  // buckets' averages over `world` ranks into averages over the ranks that trained; none else.
  std::optional<double> rescale(int world) const {
    if (!joining_ || divide_by_initial_world_ || active_ <= 0 || active_ >= world) return std::nullopt;
    return static_cast<double>(world) / static_cast<double>(active_);
  }

 private:
  bool joining_ = false;
  bool divide_by_initial_world_ = true;
  int64_t active_ = 0;
};

}  // namespace detail
}  // namespace nn
}  // namespace kindling
