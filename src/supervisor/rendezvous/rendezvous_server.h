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
// "POLL", "DONE", "MEMBER <round> <node_rank>" (an agent that reconnects to a server that took
// over: it was that node of that round). Server -> agent: "ROUND <round's fields as name=value
// words> [lost:...]" (common/round.h's round_line, the one codec of a round),
// "WAITING <n> [lost: <which member, why>]", "FAIL <message>" (also to a POLL once the job has
// failed for good: the agent stops its workers and ends).
#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "supervisor/rendezvous/line_socket.h"

namespace kindling {
namespace supervisor {

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
  /// A server that took over (from a RendezvousState of a running round) counts a member that
  /// has not connected within this long as lost, as it does a member whose connection ends
  /// (--rdzv_conf takeover_wait). It ends sooner when every member is back but the replaced
  /// server's own node (RendezvousState::replaced_address), whose process is known gone.
  std::chrono::milliseconds rejoin_grace = std::chrono::seconds(5);
  /// Live recovery: a round closes as soon as it has MIN nodes and every member of the last
  /// round has joined it or is gone (its connection ended, or its agent, which asks every
  /// `keep_alive_interval` while its workers run, has been silent for silent_after()), instead
  /// of waiting the last call: a node that arrives later is taken in by the next round, so
  /// waiting for it only delays the survivors. Off: the last call,
  /// as torchrun, since a node that misses a round under restarts costs every worker a restart.
  bool close_when_members_known = false;
  /// How often an agent asks the rendezvous while its workers run (--rdzv_conf
  /// keep_alive_interval), and how many of its questions may go missing before it counts as
  /// gone (keep_alive_max_attempt): torchrun's names for its own keep-alives.
  std::chrono::milliseconds keep_alive_interval = std::chrono::seconds(1);
  int keep_alive_max_attempt = 3;
  /// The silence after which an agent of the running round counts as gone (stopped or cut off).
  std::chrono::milliseconds silent_after() const { return keep_alive_interval * keep_alive_max_attempt; }
};

/// What a rendezvous keeps from one round to the next: what a server that takes over from a lost
/// one (etcd_rendezvous.h) starts from.
struct RendezvousState {
  /// The last round closed (-1: none yet) and the failed rounds restarted so far.
  int round = -1;
  int restarts = 0;
  /// The token of this start of the job (KINDLING_RUN_INSTANCE); empty: a new one is made.
  std::string instance;
  /// The last round's members, "host (address)" by node rank.
  std::vector<std::string> last_members;
  /// The refusal that opened the last restart with the same nodes (see close_round).
  std::string last_refusal;
  /// Not empty once the job has failed for good: why.
  std::string failure;
  /// Not kept between servers: the address of the server this one replaces, which serves no
  /// more (its port refused connections, or its key in etcd is gone: removed after such a
  /// refusal or expired with its lease). Its node's member, if one of the last round is at that
  /// address, is not waited for once every other member is back (see rejoin_grace).
  std::string replaced_address;
};

/// Serves rounds on a listening socket until destroyed.
class RendezvousServer {
 public:
  /// Takes `listen_fd` (from listen_on) and serves on a new thread, from `start` (a new job by
  /// default); `save`, when given, is called on that thread with the state each time it changes,
  /// before any agent hears of the change. Never throws for protocol errors: a malformed line
  /// gets "FAIL" and the connection is closed.
  RendezvousServer(int listen_fd, RendezvousSettings settings, RendezvousState start = {},
                   std::function<void(const RendezvousState&)> save = {});
  /// Waits up to `linger` for the agents of the running round to report DONE or leave,
  /// then stops the thread and closes every connection.
  ~RendezvousServer();
  RendezvousServer(const RendezvousServer&) = delete;
  RendezvousServer& operator=(const RendezvousServer&) = delete;

  std::chrono::milliseconds linger = std::chrono::seconds(30);

  /// Stops serving at once: closes every connection without an answer, so that the agents look
  /// for the server that takes over (this one lost its right to serve). Any thread; never throws.
  void abandon();

 private:
  struct Agent;
  void serve();
  void accept_agent();
  void on_line(Agent& agent, const std::string& line);
  void on_join(Agent& agent, const std::string& line);
  void on_member(Agent& agent, const std::string& line);
  void member_lost(const std::string& label,
                   const std::string& why = "its agent was lost (its connection to the rendezvous ended)");
  void check_silent_members();
  void check_members_back();
  void save_state() const;
  void check_round();
  void close_round(std::vector<Agent*> joined);
  void fail(const std::vector<Agent*>& agents, const std::string& message);
  std::string restarts_used_up() const;
  std::string lost_since_last_round(const std::vector<Agent*>& joined) const;
  bool last_round_accounted_for() const;
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
  std::vector<std::string> last_members_;  // "host (address)" of the last round, by node rank
  std::string instance_;                   // this start of the job (new_run_id()), sent in every round
  std::function<void(const RendezvousState&)> save_;
  std::chrono::steady_clock::time_point started_;
  bool awaiting_members_;      // took over a running round: see check_members_back
  std::string replaced_address_;  // the replaced server's address (RendezvousState::replaced_address)
  bool stop_running_ = false;  // a member was lost: the running round's agents stop their workers
  int members_gone_ = 0;       // members of the running round whose connection ended
  std::chrono::steady_clock::time_point open_since_{}, min_since_{};
  bool open_ = false, min_reached_ = false;
  std::atomic<bool> stop_{false};
  std::atomic<bool> finishing_{false};
  std::atomic<bool> abandoned_{false};
  std::thread thread_;
};

}  // namespace supervisor
}  // namespace kindling
