#pragma once
// How one call of the API reaches the engine: the group it runs on, the tensor the engine
// works on, the collective counter the stall monitor reads, the wait with its timeout, and
// the translation of engine exceptions into kindling's errors. Shared by the collectives,
// point-to-point and asynchronous Work.
#include <ATen/core/Tensor.h>

#include <chrono>
#include <exception>
#include <memory>
#include <type_traits>

#include "dist/diagnostics/fingerprint.h"
#include "dist/diagnostics/flight_recorder.h"
#include "dist/diagnostics/timeline_ops.h"
#include "dist/runtime.h"
#include "kindling/dist/dist.h"
#include "kindling/error.h"

namespace kindling {
namespace dist {
namespace detail {

/// Throws kindling::TimeoutError (with the stall monitor's diagnosis) or
/// kindling::CommunicationError for an engine exception raised by collective #seq `name`.
[[noreturn]] void translate(const std::exception& e, const GroupState& g, const char* name, int64_t seq);

/// How long a wait on `g` may take: the group timeout, plus slack for collectives so that
/// the engine's own (more precise) timeout normally reports first.
std::chrono::milliseconds wait_timeout(const GroupState& g, bool p2p);

/// Throws kindling::CommunicationError when an earlier collective failed (Runtime::broken).
void check_usable(const char* name);

/// Counts a collective `name` on `g` for the stall monitor and returns its sequence
/// number; a point-to-point call (`collective` false) is not counted, since only some
/// ranks make it, and gets the current number.
int64_t enter(GroupState& g, const char* name, bool collective = true);

/// Waits for `op` (call #seq `name` on `g`) up to wait_timeout(g, p2p). Where the engine
/// allows short waits (gloo), waits in slices of a second and, for a collective, throws
/// kindling::TimeoutError as soon as the stall monitor names stalled peers. Engine
/// exceptions propagate untranslated.
void wait_op(PendingOp& op, GroupState& g, const char* name, int64_t seq, bool p2p);

/// Starts an operation on `c`: `start(c)`, or `start(c, seq)` for a start that takes the
/// operation's number on its group (the point-to-point collectives' tags come from it).
template <typename Start>
OpPtr start_on(Start& start, Communicator& c, int64_t seq) {
  if constexpr (std::is_invocable_v<Start&, Communicator&, int64_t>) {
    return start(c, seq);
  } else {
    return start(c);
  }
}

/// Runs one blocking operation: counts it, compares fingerprints when enabled (`described`
/// gives dtype and shape; `same_shape` whether shapes must agree), records a collective in the
/// flight recorder and the operation on the timeline, starts it on the group's communicator, waits and translates
/// engine failures.
template <typename Start>
void run(GroupState& g, const char* name, Start&& start, bool p2p = false, const at::Tensor* described = nullptr,
         bool same_shape = true) {
  check_usable(name);
  const int64_t seq = enter(g, name, !p2p);
  if (!p2p && fingerprints_enabled()) check_fingerprint(g, seq, name, described, same_shape);
  const int64_t record = p2p ? -1 : flight_start(g, seq, name, described);
  const TimelineOp traced = timeline_begin(g, seq, name, described, p2p);
  try {
    OpPtr op = start_on(start, *g.comm, seq);
    wait_op(*op, g, name, seq, p2p);
    flight_complete(record);
    timeline_end(traced);
  } catch (const kindling::Error&) {
    throw;
  } catch (const std::exception& e) {
    translate(e, g, name, seq);
  }
}

/// Starts one asynchronous operation (isend, irecv, all_reduce_async, ...): counts it, compares
/// a collective's fingerprints when enabled and records it in the flight recorder (`described`:
/// its tensor, whose dtype and shape the fingerprints compare), starts it on the group's
/// communicator and returns the state a Work waits on; engine failures at start are
/// translated. `collective` selects the wait slack (see wait_timeout).
template <typename Start>
std::shared_ptr<WorkState> start_async(const std::shared_ptr<GroupState>& g, const char* name, bool collective,
                                       Start&& start, const at::Tensor* described = nullptr) {
  check_usable(name);
  auto state = std::make_shared<WorkState>();
  state->group = g;
  state->name = name;
  state->seq = enter(*g, name, collective);
  if (collective && fingerprints_enabled()) check_fingerprint(*g, state->seq, name, described, true);
  state->collective = collective;
  if (collective) state->record = flight_start(*g, state->seq, name, described, &state);
  state->timeline = timeline_begin(*g, state->seq, name, described, !collective);
  try {
    state->op = start_on(start, *g->comm, state->seq);
  } catch (const kindling::Error&) {
    throw;
  } catch (const std::exception& e) {
    translate(e, *g, name, state->seq);
  }
  timeline_watch(*state);
  return state;
}

/// A Work complete from the start (the serial model, a rank outside the group).
Work done_work(const char* name);

/// The group's state when this rank takes part in a collective on it; null in the serial
/// model or when this rank is not a member (idist then returns the input unchanged).
std::shared_ptr<GroupState> participant(const Group& group, const char* name);

// A tensor the engine can work on: defined, contiguous, on device(). `copy_back` tells
// whether the result must be copied into the caller's tensor afterwards.
struct Staged {
  at::Tensor work;
  bool copy_back = false;
};

Staged stage(const at::Tensor& t, const char* name, const char* what = "tensor");

/// The index in `g` of global rank `global`; throws kindling::UsageError naming the members.
int member_index(const GroupState& g, int global, const char* name, const char* role);

/// Throws kindling::UsageError for a bitwise reduction of a floating-point dtype.
void check_bitwise(ReduceOp op, at::ScalarType dtype, const char* name);

/// For operations that use the caller's memory directly (asynchronous ones): the tensor
/// must already be defined, contiguous and on device().
void check_in_place_tensor(const at::Tensor& t, const char* name);

}  // namespace detail
}  // namespace dist
}  // namespace kindling
