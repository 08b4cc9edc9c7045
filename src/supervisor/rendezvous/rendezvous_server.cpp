// The elastic rendezvous between kindling-run agents (see rendezvous_server.h): one thread,
// one poll() loop over the listening socket and every agent's connection.
#include "supervisor/rendezvous/rendezvous_server.h"

#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <sstream>

#include "common/round.h"
#include "common/strings.h"
#include "supervisor/process/elastic.h"

namespace kindling {
namespace supervisor {

namespace {

using Clock = std::chrono::steady_clock;

std::string seconds_text(std::chrono::milliseconds d) {
  std::ostringstream s;
  s << static_cast<double>(d.count()) / 1000.0 << " s";
  return s.str();
}

}  // namespace

struct RendezvousServer::Agent {
  LineSocket socket;
  std::string address;
  bool joined = false;
  Clock::time_point joined_at{};
  std::string reason, host, detail;
  int nproc = 0, port = 0;
  int node_rank = -1;  // in the last round; -1: not a member
  int serving = 0;     // 1: the agent that runs this server (node 0 when it is new)
  bool done = false;
  Clock::time_point heard = Clock::now();  // its last line, or the ROUND that answered its JOIN
  bool silent = false;                     // counted lost for its silence (check_silent_members)
  std::string label() const { return host + " (" + address + ")"; }
};

RendezvousServer::RendezvousServer(int listen_fd, RendezvousSettings settings, RendezvousState start,
                                   std::function<void(const RendezvousState&)> save)
    : listen_fd_(listen_fd),
      settings_(std::move(settings)),
      round_(start.round),
      restarts_(start.restarts),
      failed_(!start.failure.empty()),
      last_refusal_(std::move(start.last_refusal)),
      failure_(std::move(start.failure)),
      last_members_(std::move(start.last_members)),
      instance_(start.instance.empty() ? new_run_id() : std::move(start.instance)),
      save_(std::move(save)),
      started_(Clock::now()),
      awaiting_members_(round_ >= 0 && !failed_),
      replaced_address_(std::move(start.replaced_address)) {
  // The thread blocks every signal (it inherits this mask): the launcher's signals belong
  // to the supervision loop of the main thread.
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &old);
  thread_ = std::thread([this] { serve(); });
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
}

RendezvousServer::~RendezvousServer() {
  finishing_ = true;
  if (thread_.joinable()) thread_.join();
  ::close(listen_fd_);
}

std::vector<RendezvousServer::Agent*> RendezvousServer::joined_agents() const {
  std::vector<Agent*> joined;
  for (const auto& a : agents_)
    if (a->joined) joined.push_back(a.get());
  return joined;
}

bool RendezvousServer::running_agents_left() const {
  return std::any_of(agents_.begin(), agents_.end(),
                     [](const auto& a) { return a->node_rank >= 0 && !a->done && !a->joined; });
}

void RendezvousServer::abandon() { abandoned_ = true; }

void RendezvousServer::save_state() const {
  if (save_) save_(RendezvousState{round_, restarts_, instance_, last_members_, last_refusal_, failure_, {}});
}

void RendezvousServer::serve() {
  Clock::time_point linger_until{};
  bool lingering = false;
  while (true) {
    if (abandoned_) {
      agents_.clear();  // closes every connection unanswered
      break;
    }
    if (finishing_) {
      if (!lingering) {
        lingering = true;
        linger_until = Clock::now() + linger;
      }
      if (!running_agents_left() || Clock::now() >= linger_until) {
        fail(joined_agents(),
             "the agent that serves the rendezvous ended (its own workers completed or it was stopped) "
             "while this node waited for a next round");
        break;
      }
    }
    std::vector<pollfd> fds{{listen_fd_, POLLIN, 0}};
    for (const auto& a : agents_) fds.push_back({a->socket.fd(), POLLIN, 0});
    const int n = ::poll(fds.data(), fds.size(), 200);
    if (n > 0) {
      if (fds[0].revents & POLLIN) accept_agent();
      for (std::size_t k = 1; k < fds.size(); ++k) {
        if (!(fds[k].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        Agent& agent = *agents_[k - 1];
        agent.socket.read_available();
        while (auto line = agent.socket.next_line()) on_line(agent, *line);
      }
      // A connection that ended leaves the rendezvous (a joined agent leaves the open round);
      // a member whose workers still run is lost with its host.
      for (const auto& a : agents_)
        if (a->socket.closed() && a->node_rank >= 0 && !a->joined && !a->done) member_lost(a->label());
      agents_.erase(std::remove_if(agents_.begin(), agents_.end(), [](const auto& a) { return a->socket.closed(); }),
                    agents_.end());
    }
    check_round();
  }
}

void RendezvousServer::accept_agent() {
  const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
  if (fd < 0) return;
  auto agent = std::make_unique<Agent>();
  agent->socket = LineSocket(fd);
  agent->address = agent->socket.peer_address();
  agent->socket.send(kRendezvousGreeting);
  agents_.push_back(std::move(agent));
}

void RendezvousServer::on_line(Agent& agent, const std::string& line) {
  agent.heard = Clock::now();
  if (line.rfind("JOIN ", 0) == 0) {
    on_join(agent, line);
  } else if (line == "POLL" && failed_) {
    // The job has failed for good (a member's workers failed with no restart left): the
    // running members stop their workers now rather than at their next collective.
    agent.socket.send("FAIL " + failure_);
  } else if (line == "POLL") {
    // Someone waits for the next round: a member that left the running one, or a new node
    // while the running round has room for it.
    int waiting = 0;
    bool member_waits = false;
    int members = 0;
    for (const auto& a : agents_) {
      members += a->node_rank >= 0 && !a->joined ? 1 : 0;
      if (!a->joined) continue;
      ++waiting;
      member_waits = member_waits || a->node_rank >= 0;
    }
    if (!member_waits && members >= settings_.max_nodes) waiting = 0;
    // Stop the workers after a lost member: the next round.
    if (stop_running_) waiting = std::max(waiting, 1);
    std::string why = stop_running_ ? first_failure_ : "";
    // An agent whose workers run but which is no member: its round went on without it (it did
    // not answer in time, e.g. its host was stopped). Its workers wait on peers that left.
    if (agent.node_rank < 0 && round_ >= 0) {
      waiting = std::max(waiting, 1);
      why = agent.label() + ": this node was left out of round " + std::to_string(round_);
    }
    agent.socket.send("WAITING " + std::to_string(waiting) + (why.empty() ? "" : " lost: " + why));
  } else if (line.rfind("MEMBER ", 0) == 0) {
    on_member(agent, line);
  } else if (line == "DONE") {
    agent.done = true;
  } else {
    agent.socket.send("FAIL " + settings_.name + " rendezvous: unknown request '" + line.substr(0, 80) + "'");
    ::shutdown(agent.socket.fd(), SHUT_RDWR);
  }
}

void RendezvousServer::on_join(Agent& agent, const std::string& line) {
  std::istringstream in(line.substr(5));
  std::string run_id;
  const bool parsed =
      static_cast<bool>(in >> run_id >> agent.reason >> agent.nproc >> agent.port >> agent.host >> agent.serving);
  std::getline(in >> std::ws, agent.detail);
  if (!parsed) {
    agent.socket.send("FAIL " + settings_.name + " rendezvous: malformed join '" + line.substr(0, 120) + "'");
    ::shutdown(agent.socket.fd(), SHUT_RDWR);
    return;
  }
  if (run_id != settings_.run_id) {
    agent.socket.send("FAIL the rendezvous at this endpoint runs job '" + settings_.run_id + "', but " + agent.host +
                      " joined with --rdzv_id '" + run_id + "'; give every node the same --rdzv_id");
    return;
  }
  if (failed_) {
    agent.socket.send("FAIL " + failure_);
    return;
  }
  agent.joined = true;
  agent.done = false;
  agent.joined_at = Clock::now();
  // What opened this round decides whether it is a restart: a member's failure, or a node
  // that arrived while the running round had room. Workers that fail after their peers were
  // stopped for a membership change (a collective with a stopped peer fails) do not count.
  const bool member = agent.node_rank >= 0;
  if (cause_ == Cause::kNone && round_ >= 0) {
    if (member && agent.reason == "failed") {
      cause_ = Cause::kFailure;
      first_failure_ = agent.label() + (agent.detail.empty() ? "" : ": " + agent.detail);
      const auto refused = agent.detail.find("kindling::UsageError: ");
      refusal_ = refused == std::string::npos ? "" : ::kindling::detail::without_rank_tags(agent.detail.substr(refused));
    }
    if (!member && static_cast<int>(last_members_.size()) < settings_.max_nodes) cause_ = Cause::kMembership;
  }
  if (cause_ == Cause::kFailure && agent.reason == "failed" && restarts_ >= settings_.max_restarts) {
    // No restart is left: the job has failed, whoever else may still join.
    fail(joined_agents(), restarts_used_up());
  }
}

// An agent that reconnected after the server it knew was lost: it keeps its node rank when it
// names this server's last round and a node rank nobody connected holds.
void RendezvousServer::on_member(Agent& agent, const std::string& line) {
  std::istringstream in(line.substr(7));
  int round = -1, node_rank = -1;
  if (!(in >> round >> node_rank) || round != round_ || node_rank < 0 ||
      node_rank >= static_cast<int>(last_members_.size()))
    return;  // an earlier round's member: a new node now
  const bool taken =
      std::any_of(agents_.begin(), agents_.end(), [&](const auto& a) { return a->node_rank == node_rank; });
  if (!taken) agent.node_rank = node_rank;
}

// A member of the running round whose agent is gone: the round has failed, and the other
// members stop their workers and join the next one (rather than wait for their workers to
// notice, which a collective with a host cut off can take its whole timeout to do).
void RendezvousServer::member_lost(const std::string& label, const std::string& why) {
  if (round_ < 0) return;
  ++members_gone_;
  if (cause_ != Cause::kNone) return;
  cause_ = Cause::kFailure;
  first_failure_ = label + ": " + why;
  refusal_.clear();
  stop_running_ = true;
}

// After taking over from a lost server: a member of the last round that has not connected
// within the grace is lost. The grace ends early once every member is back but those at the
// replaced server's address: that server's port refused connections, so its agent is gone.
void RendezvousServer::check_members_back() {
  if (!awaiting_members_) return;
  std::vector<std::size_t> missing;
  bool only_replaced = !replaced_address_.empty();
  for (std::size_t n = 0; n < last_members_.size(); ++n) {
    const bool back =
        std::any_of(agents_.begin(), agents_.end(), [&](const auto& a) { return a->node_rank == static_cast<int>(n); });
    if (back) continue;
    missing.push_back(n);
    only_replaced = only_replaced && ::kindling::detail::ends_with(last_members_[n], " (" + replaced_address_ + ")");
  }
  if (!(only_replaced && !missing.empty()) && Clock::now() - started_ < settings_.rejoin_grace) return;
  awaiting_members_ = false;
  if (!missing.empty()) member_lost(last_members_[missing.front()]);
}

std::string RendezvousServer::restarts_used_up() const {
  return "the job failed with no restart left (--max_restarts " + std::to_string(settings_.max_restarts) +
         ", restarts made " + std::to_string(restarts_) + "); the failure was on " + first_failure_;
}

// A member whose agent has asked nothing for silent_after() (its host stopped or cut off) is lost
// as one whose connection ended: the others go on without waiting for their stall period.
void RendezvousServer::check_silent_members() {
  const auto now = Clock::now();
  for (auto& a : agents_) {
    if (a->node_rank < 0 || a->joined || a->done || a->silent || now - a->heard < settings_.silent_after()) continue;
    a->silent = true;
    member_lost(a->label(), "its agent has said nothing for " + seconds_text(settings_.silent_after()) +
                                " (keep_alive_interval x keep_alive_max_attempt): its host was stopped or cut off");
  }
}

void RendezvousServer::check_round() {
  check_members_back();
  check_silent_members();
  const std::vector<Agent*> joined = joined_agents();
  const auto now = Clock::now();
  if (joined.empty()) {
    open_ = min_reached_ = false;
    return;
  }
  if (!open_) {
    open_ = true;
    open_since_ = now;
  }
  const int count = static_cast<int>(joined.size());
  if (count < settings_.min_nodes) {
    min_reached_ = false;
  } else if (!min_reached_) {
    min_reached_ = true;
    min_since_ = now;
  }
  if (count >= settings_.max_nodes || (min_reached_ && now - min_since_ >= settings_.last_call) ||
      (min_reached_ && settings_.close_when_members_known && last_round_accounted_for())) {
    close_round(joined);
    return;
  }
  if (!min_reached_ && now - open_since_ >= settings_.join_timeout) {
    std::vector<std::string> hosts;
    for (const Agent* a : joined) hosts.push_back(a->label());
    std::string message = "rendezvous round " + std::to_string(round_ + 1) + " failed: " + std::to_string(count) +
                          " node" + (count == 1 ? "" : "s") + " joined (" + ::kindling::detail::join(hosts, ", ") +
                          "), fewer than the minimum of " + std::to_string(settings_.min_nodes) + ", within " +
                          seconds_text(settings_.join_timeout) + " (join_timeout)";
    const std::string lost = lost_since_last_round(joined);
    if (!lost.empty()) message += "; lost since round " + std::to_string(round_) + ": " + lost;
    message += ". Start the missing nodes, or lower the minimum of --nnodes";
    fail(joined, message);
  }
}

// Live recovery's early close (RendezvousSettings::close_when_members_known): some member of
// the running round is known to be gone (its connection ended, or its agent has not asked for
// silent_after(): stopped or cut off), and every other member has joined. Not while a server
// that took over still waits for the members to reconnect.
bool RendezvousServer::last_round_accounted_for() const {
  if (round_ < 0 || awaiting_members_) return false;
  const auto now = Clock::now();
  int gone = members_gone_;
  for (const auto& a : agents_) {
    if (a->node_rank < 0 || a->joined || a->done) continue;
    if (now - a->heard < settings_.silent_after()) return false;  // running and answering: it may join
    ++gone;
  }
  return gone > 0;
}

std::string RendezvousServer::lost_since_last_round(const std::vector<Agent*>& joined) const {
  std::vector<std::string> lost;
  for (const auto& member : last_members_) {
    const bool back = std::any_of(joined.begin(), joined.end(), [&](const Agent* a) { return a->label() == member; });
    if (!back) lost.push_back(member);
  }
  return ::kindling::detail::join(lost, ", ");
}

void RendezvousServer::fail(const std::vector<Agent*>& agents, const std::string& message) {
  failed_ = true;
  failure_ = message;
  save_state();
  for (Agent* a : agents) {
    a->socket.send("FAIL " + message);
    a->joined = false;
  }
  open_ = min_reached_ = false;
}

void RendezvousServer::close_round(std::vector<Agent*> joined) {
  // Members of the last round keep their order; new nodes follow, the serving agent first
  // (in the first round rank 0 runs on the endpoint's host, which must stay up anyway), then
  // in the order they joined.
  std::stable_sort(joined.begin(), joined.end(), [](const Agent* a, const Agent* b) {
    const bool am = a->node_rank >= 0, bm = b->node_rank >= 0;
    if (am != bm) return am;
    if (am) return a->node_rank < b->node_rank;
    if (a->serving != b->serving) return a->serving > b->serving;
    return a->joined_at < b->joined_at;
  });
  const bool restart = round_ >= 0 && cause_ == Cause::kFailure;
  cause_ = Cause::kNone;
  stop_running_ = false;
  members_gone_ = 0;
  const std::string lost = lost_since_last_round(joined);
  if (restart) {
    if (restarts_ >= settings_.max_restarts) return fail(joined, restarts_used_up());
    // A refusal (a kindling::UsageError) met twice in a row by the same nodes would only be
    // met again: the job ends rather than spending every restart on it.
    const bool same_nodes = lost.empty() && joined.size() == last_members_.size();
    if (!refusal_.empty() && refusal_ == last_refusal_ && same_nodes) {
      return fail(joined, "the workers were refused twice in a row the same way with the same " +
                              std::to_string(joined.size()) +
                              " node(s), so a restart cannot succeed; the refusal was on " + first_failure_ +
                              ". Fix its cause (restarts made " + std::to_string(restarts_) + " of " +
                              std::to_string(settings_.max_restarts) + ")");
    }
    last_refusal_ = same_nodes ? refusal_ : "";
    ++restarts_;
  } else {
    last_refusal_.clear();
  }
  ++round_;
  for (const auto& a : agents_) a->node_rank = -1, a->silent = false;
  std::vector<std::string> hosts;
  int world = 0;
  for (std::size_t i = 0; i < joined.size(); ++i) {
    joined[i]->node_rank = static_cast<int>(i);
    hosts.push_back(joined[i]->host);
    world += joined[i]->nproc;
  }
  last_members_.clear();
  for (const Agent* a : joined) last_members_.push_back(a->label());
  save_state();  // before any agent hears of the round: a server that takes over knows it
  const Agent& master = *joined.front();
  int offset = 0;
  for (Agent* a : joined) {
    ::kindling::detail::Round layout;
    layout.round = round_;
    layout.restarts = restarts_;
    layout.node_rank = a->node_rank;
    layout.nnodes = static_cast<int>(joined.size());
    layout.rank_offset = offset;
    layout.world_size = world;
    layout.master_addr = master.address;
    layout.master_port = master.port;
    layout.instance = instance_;
    layout.hosts = ::kindling::detail::join(hosts, ",");
    a->socket.send(::kindling::detail::round_line(layout, lost));
    offset += a->nproc;
    a->joined = false;
    // Its silence counts from this answer: the time it waited in the round was no silence (live
    // recovery's early close otherwise took a member that waited the last call for gone).
    a->heard = Clock::now();
  }
  open_ = min_reached_ = false;
}

}  // namespace supervisor
}  // namespace kindling
