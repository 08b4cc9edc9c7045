#pragma once
// One rendezvous round of an elastic job (kindling-run --nnodes MIN:MAX), as one node sees it,
// and its one text codec. The same fields travel three ways: the rendezvous server's answer
// to an agent's JOIN (a line, "ROUND " then the fields), the live-recovery channel's round
// file for the workers kept through a new round (one field a line, supervisor/live_channel.h),
// and torchrun's variables of a worker started in it (round_variables). Plain C++, no
// LibTorch: used by the launcher (src/supervisor) and the workers' runtime (src/dist/live*).
#include <string>
#include <utility>
#include <vector>

namespace kindling {
namespace detail {

/// The variable that holds the round a worker's world was made in (kindling-run
/// --live_recovery sets it when it starts a worker; a rejoin moves the worker to a newer one).
inline constexpr char kLiveRoundVariable[] = "KINDLING_LIVE_ROUND";

/// What a round gives one node.
struct Round {
  int round = 0;
  /// Failed rounds so far (TORCHELASTIC_RESTART_COUNT).
  int restarts = 0;
  int node_rank = 0;
  int nnodes = 1;
  /// The global rank of this node's first worker.
  int rank_offset = 0;
  int world_size = 1;
  /// Where worker rank 0 hosts the workers' own store (node 0's address and a port free there).
  std::string master_addr;
  int master_port = 0;
  /// The round's hosts by node rank ("node0,node1"), for messages.
  std::string hosts;
  /// The token of this start of the job (KINDLING_RUN_INSTANCE), made by the rendezvous
  /// host's agent and the same in every round.
  std::string instance;
};

/// The fields of `round` as "name=value" words joined by `separator` (' ' for the rendezvous
/// line, '\n' for the live channel's file, which then ends with one). Never throws.
std::string encode_round(const Round& round, char separator);

/// Reads what encode_round wrote, with either separator (words are split at any white space;
/// words of unknown names are skipped, for a newer writer). Returns what is wrong (a field
/// missing or not a number, naming it), empty when `round` was filled. Never throws.
std::string decode_round(const std::string& text, Round& round);

/// The rendezvous server's answer that gives an agent its place in a round that closed:
/// "ROUND " then encode_round(round, ' '), then " lost:<who>" when members of the last round
/// were left out (`lost`, for messages). Never throws.
std::string round_line(const Round& round, const std::string& lost);
/// Reads a round_line: false when `line` is not one (another answer, or a field missing).
/// Never throws.
bool parse_round_line(const std::string& line, Round& round, std::string& lost);

/// torchrun's variables of local rank `local` of a node of `nproc` workers in `round`: RANK,
/// LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK, GROUP_WORLD_SIZE, MASTER_ADDR and
/// MASTER_PORT. Never throws.
std::vector<std::pair<std::string, std::string>> round_variables(const Round& round, int local, int nproc);

}  // namespace detail
}  // namespace kindling
