#pragma once
// The elastic rendezvous of kindling-run agents (--nnodes MIN:MAX), served by the agent on
// the --rdzv_endpoint host on a thread of its own. Each (re)start of the job is one round:
// agents join; the round closes at MAX nodes at once, or at MIN or more once the last call
// has passed with no one new; each agent gets its node rank (the last round's order, then
// the serving agent, then new nodes as they joined), the ranks of its workers and where the
// workers' own rendezvous is. While a round runs, agents ask whether anyone
// waits for the next one (a node that failed or a new one): then they stop their workers
// and join it. Plain POSIX; internal to src/supervisor/.
//
// Wire (one text line each). Agent -> server: "JOIN <run_id> <reason> <nproc> <port>
// <host> <serving> [detail]" (reason: new, failed, stopped; port: a free port on the
// agent's host for the workers' store; serving: 1 from the agent that runs the server),
// "POLL", "DONE". Server -> agent: "ROUND <round> <restarts> <node_rank> <nnodes>
// <rank_offset> <world_size> <master_addr> <master_port> <hosts,...> [lost:...]",
// "WAITING <n>", "FAIL <message>".
#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "supervisor/line_socket.h"

namespace kindling {
namespace launch {

/// The line the server sends first on every connection: what tells an agent that the
/// program at the endpoint is a kindling-run rendezvous and not another program on its port.
inline constexpr const char* kRendezvousGreeting = "KINDLING-RENDEZVOUS 1";

struct RendezvousSettings {
  int min_nodes = 1;
  int max_nodes = 1;
  /// Failed rounds allowed after the first (torchrun's --max_restarts); a round that only
  /// changes membership (a node arrived) does not count.
  int max_restarts = 0;
  /// The job's identity; an agent that joins with another one is refused.
  std::string run_id;
  /// How long a round may wait for MIN nodes before the job fails.
  std::chrono::milliseconds join_timeout = std::chrono::seconds(600);
  /// How long a round with MIN or more nodes (fewer than MAX) waits for more.
  std::chrono::milliseconds last_call = std::chrono::seconds(30);
  /// Names the launcher in messages.
  std::string name = "kindling-run";
};

/// Serves rounds on a listening socket until destroyed.
class RendezvousServer {
 public:
  /// Takes `listen_fd` (from listen_on) and serves on a new thread. Never throws for
  /// protocol errors: a malformed line gets "FAIL" and the connection is closed.
  RendezvousServer(int listen_fd, RendezvousSettings settings);
  /// Waits up to `linger` for the agents of the running round to report DONE or leave,
  /// then stops the thread and closes every connection.
  ~RendezvousServer();
  RendezvousServer(const RendezvousServer&) = delete;
  RendezvousServer& operator=(const RendezvousServer&) = delete;

  std::chrono::milliseconds linger = std::chrono::seconds(30);

 private:
  struct Agent;
  void serve();
  void accept_agent();
  void on_line(Agent& agent, const std::string& line);
  void on_join(Agent& agent, const std::string& line);
  void check_round();
  void close_round(std::vector<Agent*> joined);
  void fail(const std::vector<Agent*>& agents, const std::string& message);
  std::string restarts_used_up() const;
  std::string lost_since_last_round(const std::vector<Agent*>& joined) const;
  bool running_agents_left() const;
  /// The agents waiting for the next round, in the order they connected.
  std::vector<Agent*> joined_agents() const;

  int listen_fd_;
  RendezvousSettings settings_;
  std::vector<std::unique_ptr<Agent>> agents_;
  int round_ = -1;
  int restarts_ = 0;
  bool failed_ = false;
  /// What opened the round being gathered (see on_join).
  enum class Cause { kNone, kFailure, kMembership } cause_ = Cause::kNone;
  std::string first_failure_;  // "host (address): what failed" when cause_ is kFailure
  std::string refusal_;        // its "kindling::UsageError: ..." part, when it is a refusal
  std::string last_refusal_;   // the refusal that opened the previous restart, same nodes
  std::string failure_;
  std::vector<std::string> last_members_;
  const std::string instance_;  // this start of the job (new_run_id()), sent in every round  // "host (address)" of the
                                // last round, by node rank
  std::chrono::steady_clock::time_point open_since_{}, min_since_{};
  bool open_ = false, min_reached_ = false;
  std::atomic<bool> stop_{false};
  std::atomic<bool> finishing_{false};
  std::thread thread_;
};

}  // namespace launch
}  // namespace kindling
