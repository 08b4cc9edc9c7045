#pragma once
/// \file
/// Process groups and asynchronous work handles of kindling::dist.

#include <chrono>
#include <memory>
#include <vector>

#include "kindling/export.h"

namespace kindling {
namespace dist {

namespace detail {
struct GroupState;
struct WorkState;
}  // namespace detail

/// A set of ranks that run collectives together.
///
/// A default-constructed Group means "the world" (every rank), resolved when a collective
/// runs, so `Group{}` is what every collective takes by default. Other groups come from
/// `new_group(ranks)`. Copying a Group is cheap (it shares state). A Group stays usable
/// until `finalize()`; after that using it throws kindling::UsageError.
class KINDLING_API Group {
 public:
  /// The world group.
  Group() = default;

  /// True for the world group (default-constructed or returned by world()).
  bool is_world() const;
  /// Global ranks of the members, ascending.
  std::vector<int> ranks() const;
  /// Number of members.
  int size() const;
  /// This process's rank inside the group, or -1 when it is not a member.
  int rank() const;
  /// Whether this process is a member of the group.
  bool is_member() const { return rank() >= 0; }

  /// Internal: the shared state (null for the world group).
  const std::shared_ptr<detail::GroupState>& state() const { return state_; }
  explicit Group(std::shared_ptr<detail::GroupState> state) : state_(std::move(state)) {}

 private:
  std::shared_ptr<detail::GroupState> state_;
};

/// A handle on an asynchronous operation (isend / irecv).
///
/// `wait()` blocks until the operation is done and throws kindling::TimeoutError when it
/// does not complete within the group's timeout, or kindling::CommunicationError when the
/// engine reports a failure. A Work that is destroyed without being waited on is waited
/// on by its destructor (errors are then only logged), so a tensor handed to isend/irecv
/// is never released while the engine still uses it.
class KINDLING_API Work {
 public:
  Work() = default;
  explicit Work(std::shared_ptr<detail::WorkState> state) : state_(std::move(state)) {}
  Work(Work&&) noexcept = default;
  Work& operator=(Work&&) noexcept;
  Work(const Work&) = delete;
  Work& operator=(const Work&) = delete;
  ~Work();

  /// Blocks until done. Throws kindling::TimeoutError / kindling::CommunicationError.
  void wait();
  /// Non-blocking: whether the operation has finished (successfully or not).
  bool is_completed() const;
  /// For a receive from any source: the global rank the message came from (after wait()).
  int source_rank() const;
  /// Whether this handle refers to an operation (false once moved from or default-made).
  bool valid() const { return state_ != nullptr; }

 private:
  std::shared_ptr<detail::WorkState> state_;
};

}  // namespace dist
}  // namespace kindling
