#pragma once
// The files between an elastic agent in live-recovery mode (kindling-run --live_recovery) and
// its workers, in a private folder named to the workers by KINDLING_LIVE_DIR: the agent writes
// "announce" (the number of the round being formed: the workers leave their step) and "round"
// (the round's layout, common/round.h's encode_round a field a line: the workers make their
// new world from it); a worker
// whose collective failed before the agent heard of anything writes "request" (why), and one
// whose node must leave the job (its replica diverged) writes "leave" (why). Each file
// is written whole (a temporary file renamed over it). The worker's side is
// src/dist/live.cpp. Internal to src/supervisor/; plain POSIX.
#include <optional>
#include <string>

#include "common/round.h"

namespace kindling {
namespace supervisor {

using RoundLayout = ::kindling::detail::Round;

/// The variable that names the folder to the workers, and the one that holds the round their
/// world was made in.
inline constexpr char kLiveDirVariable[] = "KINDLING_LIVE_DIR";
using ::kindling::detail::kLiveRoundVariable;
/// Set (to 1) for workers started before their node joined a round (kindling-run --warm_join):
/// their first initialize() waits for the round file instead of reading RANK and the rest.
inline constexpr char kLiveStandbyVariable[] = "KINDLING_LIVE_STANDBY";
/// The files in that folder.
inline constexpr char kLiveAnnounceFile[] = "announce";
inline constexpr char kLiveRoundFile[] = "round";
inline constexpr char kLiveRequestFile[] = "request";
/// Written by a worker whose node must leave the job (kindling::dist::leave_job: its replica
/// diverged): the agent stops the node's workers and ends without joining another round, so
/// that the others go on without this host, as after a lost one.
inline constexpr char kLiveLeaveFile[] = "leave";
/// Made by a worker that takes part (the first time it asks whether live recovery is on, as
/// kindling::handlers::LiveRecovery does at its checks, or when it rejoins): a program without
/// it cannot make a new round's world in the workers kept through it (the agent says so once).
inline constexpr char kLiveTakingPartFile[] = "taking_part";
/// Made by a worker started under kLiveStandbyVariable once its initialize() waits for the
/// first round: "standby.<LOCAL_RANK>". The agent joins when every worker of its node has one.
inline constexpr char kLiveStandbyFile[] = "standby";

class LiveChannel {
 public:
  /// Makes the folder. Throws std::runtime_error when it cannot be made.
  LiveChannel();
  /// Removes the folder and its files.
  ~LiveChannel();
  LiveChannel(const LiveChannel&) = delete;
  LiveChannel& operator=(const LiveChannel&) = delete;

  const std::string& folder() const { return folder_; }
  /// Tells the workers that round `round` is being formed. Never throws (a failed write is
  /// said on stderr: the workers then notice at their next failed collective).
  void announce(int round);
  /// Gives the workers the layout of the round that closed. Never throws (as announce).
  void publish(const RoundLayout& layout);
  /// A worker's request for a new round (its reason), taken away; unset when there is none or
  /// when it was made in a round before `round` (a round already formed since answers it).
  /// The request file's first line is the round the worker's world was made in.
  std::optional<std::string> take_request(int round);
  /// Whether a worker said it takes part (kLiveTakingPartFile). Never throws.
  bool taken_part() const;
  /// How many of local ranks 0..nproc-1 wait for their first round (kLiveStandbyFile). Never
  /// throws.
  int standing_by(int nproc) const;
  /// Why a worker asked this node to leave the job (kLiveLeaveFile, kept); unset when none did.
  /// Never throws.
  std::optional<std::string> leave_request() const;

 private:
  void write(const std::string& name, const std::string& text);
  std::string folder_;
};

}  // namespace supervisor
}  // namespace kindling
