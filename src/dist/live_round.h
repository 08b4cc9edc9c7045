#pragma once
// Live recovery, the worker's view of the launcher's rounds (the files of
// src/supervisor/agent/live_channel.h): which round is announced, the layout of the round that
// closed, and a world made so that a newer round can give it up. A world being made waits for
// every rank of its round; when a host is lost meanwhile (a second loss during a recovery, a
// loss while a host joins) its ranks never come, and the launcher forms a newer round at once:
// the ranks that wait must take that round instead of waiting out the rendezvous timeout.
// Used by initialize() (runtime.cpp) and rejoin() (live.cpp).
#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "common/round.h"
#include "dist/backends/backend.h"
#include "dist/backends/registry.h"
#include "dist/base/world_config.h"
#include "kindling/error.h"

namespace kindling {
namespace dist {
namespace detail {

/// Thrown by make_backend when the world being made was given up for a newer round.
struct WorldGivenUp : CommunicationError {
  WorldGivenUp(int round, int announced, const std::string& message)
      : CommunicationError(message), round(round), announced(announced) {}
  int round;      // the round whose world was given up
  int announced;  // the newer round the launcher announced
};

/// The round this process's world is (or is being) made in: the round it entered last
/// (launch/entered_round.h), else KINDLING_LIVE_ROUND as the launcher started it; -1 unset.
int live_round();

/// Waits up to `timeout` for the layout of a round after `after` (checking every 50 ms), read
/// from the launcher's round file. Throws kindling::TimeoutError, naming `who`, when none comes
/// (the launcher ends the job when its rendezvous fails), kindling::Error when the file lacks
/// a field. Only under live recovery.
::kindling::detail::Round wait_for_round(int after, std::chrono::milliseconds timeout, const char* who);

/// Tells the agent, once per process, that this program takes part in live recovery (the live
/// channel's taking_part file in `folder`). Never throws.
void say_taking_part(const std::string& folder);

/// A worker its agent started before the node joined a round (kindling-run --warm_join:
/// KINDLING_LIVE_STANDBY set, no round entered yet): says it waits (the live channel's standby
/// file, which lets the agent join) and waits up to `timeout` for the first round its node
/// joins, then enters it. Returns whether it did; does nothing otherwise. Throws
/// kindling::TimeoutError when no round comes. initialize() calls it first.
bool wait_as_standby(std::chrono::milliseconds timeout);

/// Makes `round` this process's place, as the launcher would have for a new process: a record
/// of the runtime's (launch/entered_round.h) that the launcher's rules read from now on, never
/// the environment, which other threads may read meanwhile (initialize() publishes RANK and
/// the rest there, common/env.h). Says so in the log. Call with no world initialized. Any rank.
void enter_round(const ::kindling::detail::Round& round);

/// `traits.make(config)`. Under live recovery it runs on a thread of its own while this one
/// watches the launcher's announcements (every 100 ms): when a round newer than the one being
/// made is announced before the world is made, the world is given up (`config.given_up` set,
/// the thread left to end by itself, a backend it still makes never used) and WorldGivenUp is
/// thrown. Throws what `traits.make` throws.
std::unique_ptr<Backend> make_backend(const BackendTraits& traits, WorldConfig config);

/// Calls `initialize_once` (initialize()'s work) until it makes a world: when it throws
/// WorldGivenUp, waits up to `timeout` for the newer round's layout, says so in the log,
/// enters that round and calls it again. Throws what `initialize_once` throws otherwise, and
/// kindling::TimeoutError when the newer round's layout does not come.
void taking_newer_rounds(const std::function<void()>& initialize_once, std::chrono::milliseconds timeout);

}  // namespace detail
}  // namespace dist
}  // namespace kindling
