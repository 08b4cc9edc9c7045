// One node's elastic agent (see elastic_agent.h): rounds of join, run, rejoin.
#include "supervisor/agent/elastic_agent.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <sstream>
#include <thread>
#include <utility>

#include "common/env.h"
#include "common/host.h"
#include "supervisor/process/elastic.h"
#include "supervisor/process/flight_verdict.h"
#include "supervisor/agent/live_channel.h"
#include "supervisor/rendezvous/rendezvous_access.h"

namespace kindling {
namespace supervisor {

namespace {

using Clock = std::chrono::steady_clock;

// This agent's connection to the rendezvous server. Where the server can move (etcd), a lost
// connection is made again to the server that took over, which is told which node of which
// round this agent was (MEMBER), and the request is repeated.
class AgentLink {
 public:
  AgentLink(std::unique_ptr<RendezvousAccess> access, std::string name)
      : access_(std::move(access)), name_(std::move(name)) {}

  bool open(std::string& error) {
    socket_ = access_->connect(error);
    if (socket_.valid() && round_ >= 0)
      socket_.send("MEMBER " + std::to_string(round_) + " " + std::to_string(node_rank_));
    return socket_.valid();
  }
  // The server's answer to `request`, waiting up to `wait` for each server; unset when the
  // server is lost (and no other one takes over).
  std::optional<std::string> ask(const std::function<std::string()>& request, std::chrono::milliseconds wait) {
    for (int servers = 0;; ++servers) {
      std::optional<std::string> answer;
      if (socket_.send(request())) answer = socket_.receive(Clock::now() + wait);
      // A server lost again and again (5 times in one request) is not worth another try.
      // Where the server can move, silence too means it is gone (a host cut off sends no FIN).
      if (answer || !access_->movable() || servers == 5) return answer;
      say(name_, "lost the rendezvous server; looking for the one that takes over (" + access_->where() + ")");
      std::string error;
      if (!open(error)) {
        say(name_, "no rendezvous server took over: " + error);
        return std::nullopt;
      }
    }
  }
  void member_of(int round, int node_rank) {
    round_ = round;
    node_rank_ = node_rank;
  }
  void send(const std::string& line) { socket_.send(line); }
  void finished() { access_->finished(); }
  bool serving() const { return access_->serving(); }
  std::string where() const { return access_->where(); }

 private:
  std::unique_ptr<RendezvousAccess> access_;
  std::string name_;
  LineSocket socket_;
  int round_ = -1, node_rank_ = -1;
};

// One line that says why this node's workers failed, for the other nodes' messages.
std::string failure_line(const SupervisorResult& result, const std::vector<std::string>& error_files) {
  std::string line = first_failure(result, error_files);
  if (line.empty()) {
    for (const auto& w : result.workers) {
      if (!w.failed()) continue;
      line =
          "rank " + std::to_string(w.rank) +
          (w.exited ? " exited with code " + std::to_string(w.exit_code) : " was killed by " + signal_name(w.signal));
      break;
    }
  }
  for (char& c : line)
    if (c == '\n' || c == '\r') c = ' ';
  return line.substr(0, 400);
}

std::string describe(const RoundLayout& r, int nproc, const std::string& lost) {
  std::ostringstream s;
  s << "rendezvous round " << r.round << " (restart " << r.restarts << "): " << r.nnodes << " node"
    << (r.nnodes == 1 ? "" : "s") << " [" << r.hosts << "], world size " << r.world_size << "; this node is node "
    << r.node_rank << " with ranks " << r.rank_offset << ".." << r.rank_offset + nproc - 1;
  if (!lost.empty()) s << "; left out (not back within the last call): " << lost;
  return s.str();
}

}  // namespace

std::vector<std::pair<std::string, std::string>> worker_environment(const RoundLayout& layout, int local, int nproc) {
  auto env = ::kindling::detail::round_variables(layout, local, nproc);
  // The node's cores shared between its workers unless the user decided (torchrun sets 1):
  // LibTorch's OpenMP threads of several workers on the same cores otherwise spin against
  // each other (a 3-rank gloo test on 2 cores ran 4.4 times slower, docs/launching.md).
  if (!::kindling::detail::get_env("OMP_NUM_THREADS")) {
    const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
    env.emplace_back("OMP_NUM_THREADS",
                     std::to_string(std::max(1u, cores / static_cast<unsigned>(std::max(1, nproc)))));
  }
  return env;
}

namespace {

// How often an agent asks the rendezvous while its workers run under live recovery (at most;
// less when keep_alive_interval is shorter).
constexpr std::chrono::milliseconds kLivePoll{200};

// One node's agent through its rounds (see elastic_agent.h).
class ElasticAgent {
 public:
  ElasticAgent(const ElasticAgentOptions& o, const std::function<std::vector<WorkerSpec>(const RoundLayout&)>& make,
               const SupervisorOptions& supervisor)
      : o_(o),
        make_workers_(make),
        supervisor_(supervisor),
        name_(supervisor.name),
        link_(o.etcd_endpoints.empty() ? endpoint_access(o, name_) : etcd_access(o, name_), name_),
        host_(::kindling::detail::host_name("unknown-host")) {
    if (o.live_recovery) live_.emplace();
  }

  int run() {
    std::string error;
    if (!link_.open(error)) {
      say(name_, "cannot reach the rendezvous at " + link_.where() + ": " + error);
      return 1;
    }
    std::string reason = "new", detail;
    bool warm = live_ && o_.warm_join;  // the first workers start before the node joins
    for (int attempt = 0;; ++attempt) {
      if (!warm && !join(reason, detail)) return last_exit_ != 0 ? last_exit_ : 1;
      std::vector<WorkerSpec> specs = warm ? standby_workers() : make_workers_(layout_);
      if (live_) {
        for (auto& w : specs)
          w.env.insert(w.env.end(), {{kLiveDirVariable, live_->folder()},
                                     warm ? std::make_pair(std::string(kLiveStandbyVariable), std::string("1"))
                                          : std::make_pair(std::string(kLiveRoundVariable),
                                                           std::to_string(layout_.round))});
      }
      const AttemptFiles files = prepare_attempt(specs, attempt, layout_.restarts, o_.rendezvous.max_restarts,
                                                 {o_.rendezvous.run_id, layout_.instance}, folder_);
      SupervisorOptions options = supervisor_;
      options.flight_record_folder = files.flight_folder;
      options.stop_check = [this] { return stop_check(); };
      // Under live recovery the survivors wait for every agent to hear of a new round (a lost
      // node, a joiner): ask five times a second (a line on an open connection), not once.
      options.stop_check_every =
          live_ ? std::min(o_.rendezvous.keep_alive_interval, kLivePoll) : o_.rendezvous.keep_alive_interval;
      kept_through_round_ = false;
      standby_ = std::exchange(warm, false);
      standby_since_ = std::chrono::steady_clock::now();
      const SupervisorResult result = supervise(specs, options);
      if (standby_) return ended_standing_by(result);
      say_if_not_taking_part(result);
      const std::string flight = result.exit_code != 0 ? flight_line(files) : std::string();
      remove_empty_flight_folders(files.flight_folder);
      if (result.received_signal != 0) {
        std::fputs(result.summary.c_str(), stderr);
        return result.exit_code;
      }
      if (!rendezvous_failure_.empty()) return last_exit_ != 0 ? last_exit_ : 1;  // the rendezvous failed while they ran
      if (const auto leave = live_ ? live_->leave_request() : std::nullopt) return leave_job(result, flight, *leave);
      if (result.exit_code == 0 && !result.stopped_on_request) {
        link_.send("DONE");
        link_.finished();
        return 0;
      }
      if (result.exit_code != 0) {
        std::fputs((result.summary + flight).c_str(), stderr);
        reason = "failed";
        detail = failure_line(result, files.error_files);
        last_exit_ = result.exit_code;
      } else {
        say(name_, why_stopped_.empty()
                       ? "a node waits for the next rendezvous round; stopped this node's workers to join it"
                       : "a node of the running round was lost (" + why_stopped_ +
                             "); stopped this node's workers to join the next round");
        reason = "stopped";
        detail.clear();
      }
      if (!linked_) return last_exit_ != 0 ? last_exit_ : 1;
    }
  }

 private:
  // Joins the next round; false (the reason said) when the rendezvous failed or is lost.
  bool join(const std::string& reason, const std::string& detail) {
    const auto line = [&] {
      return "JOIN " + o_.rendezvous.run_id + " " + reason + " " + std::to_string(o_.nproc_per_node) + " " +
             std::to_string(find_free_port()) + " " + host_ + (link_.serving() ? " 1" : " 0") +
             (detail.empty() ? "" : " " + detail);
    };
    const auto reply = link_.ask(line, o_.rendezvous.join_timeout + o_.rendezvous.last_call + std::chrono::seconds(60));
    std::string lost;
    if (!reply || reply->rfind("FAIL ", 0) == 0 || !::kindling::detail::parse_round_line(*reply, layout_, lost)) {
      rendezvous_failure_ =
          !reply ? "lost the rendezvous at " + link_.where() + " (its host's agent ended or cannot be reached)"
          : reply->rfind("FAIL ", 0) == 0 ? reply->substr(5)
                                          : "unexpected rendezvous reply '" + reply->substr(0, 120) + "'";
      say(name_, rendezvous_failure_);
      return false;
    }
    link_.member_of(layout_.round, layout_.node_rank);
    say(name_, describe(layout_, o_.nproc_per_node, lost));
    return true;
  }

  // Asked every keep_alive_interval (kLivePoll under live recovery) while the workers run:
  // whether to stop them. In live-recovery mode a next round (a node lost or waiting, or this
  // node's workers asking) is joined with the workers running, which make their new world from
  // its layout; they are stopped only when the rendezvous fails.
  bool stop_check() {
    if (standby_) return !join_when_standing_by();
    if (!linked_) return false;
    // A worker asked this node to leave (its replica diverged): stop the workers before another
    // round is joined with them kept.
    if (live_ && live_->leave_request()) return true;
    std::optional<std::string> request = live_ ? live_->take_request(layout_.round) : std::nullopt;
    if (!request) {
      const auto answer = link_.ask([] { return std::string("POLL"); }, std::chrono::seconds(10));
      if (answer && answer->rfind("FAIL ", 0) == 0) {
        // The job failed for good on another node: stop the workers (asking them for their
        // flight records) and end, rather than leave them to fail at their next collective.
        rendezvous_failure_ = answer->substr(5);
        say(name_, rendezvous_failure_ + "; stopping this node's workers");
        return true;
      }
      if (!answer || answer->rfind("WAITING ", 0) != 0) {
        if (live_) return !reach_again();
        linked_ = false;
        say(name_, "lost the rendezvous while the workers run; they go on, but this node cannot rejoin a next round");
        return false;
      }
      const auto lost = answer->find(" lost: ");
      why_stopped_ = lost == std::string::npos ? "" : answer->substr(lost + 7);
      if (std::atoi(answer->c_str() + 8) == 0) return false;
    }
    if (!live_) return true;
    say(name_, request ? "a worker of this node asked for a new round (" + *request +
                             "); joining it with the workers kept (live recovery)"
                       : (why_stopped_.empty() ? std::string("a node waits for the next round")
                                               : "a node of the running round was lost (" + why_stopped_ + ")") +
                             "; joining the next round with the workers kept (live recovery)");
    return !join_live(request ? "failed" : "live", request ? *request : "");
  }

  // Live recovery: after workers kept through a new round failed, says once when none of them
  // ever said it takes part (LiveChannel's taking_part file): such a program cannot make the
  // new round's world, and each loss costs it two restarts.
  void say_if_not_taking_part(const SupervisorResult& result) {
    if (!live_ || !kept_through_round_ || result.exit_code == 0 || said_not_taking_part_ || live_->taken_part()) return;
    said_not_taking_part_ = true;
    say(name_, "--live_recovery: the program does not take part in live recovery (no worker of this node used "
               "kindling::handlers::LiveRecovery or kindling::dist::live_recovery_enabled() / rejoin()): its workers, "
               "kept through the new round, failed at their next collective instead of making its world, so each "
               "lost node costs two restarts (the round the workers were kept through, and the one after they "
               "failed). Train inside kindling::handlers::LiveRecovery::run, or drop --live_recovery");
  }

  // Live recovery: a worker asked this node to leave the job (kindling::dist::leave_job: its
  // replica diverged). Its workers are stopped; the agent ends without joining a next round, so
  // that its connection's end makes the others go on without this host, as after a lost one.
  int leave_job(const SupervisorResult& result, const std::string& flight, const std::string& why) {
    std::fputs((result.summary + flight).c_str(), stderr);
    say(name_, "a worker asked this node to leave the job (" + why.substr(0, 600) +
                   "); its workers are stopped and this node leaves, the others go on without it (live recovery)");
    return result.exit_code != 0 ? result.exit_code : 1;
  }

  // --warm_join: this node's workers before it joins a round, without the round's variables
  // (their first initialize() reads the round from the live channel).
  std::vector<WorkerSpec> standby_workers() {
    std::vector<WorkerSpec> specs = make_workers_(RoundLayout{});
    std::vector<std::string> unknown{"ROLE_RANK", "ROLE_WORLD_SIZE"};
    for (const auto& [name, value] : ::kindling::detail::round_variables(RoundLayout{}, 0, 1))
      if (name != "LOCAL_RANK" && name != "LOCAL_WORLD_SIZE") unknown.push_back(name);
    for (auto& w : specs) {
      w.env.erase(std::remove_if(w.env.begin(), w.env.end(),
                                 [&](const auto& kv) {
                                   return std::find(unknown.begin(), unknown.end(), kv.first) != unknown.end();
                                 }),
                  w.env.end());
    }
    return specs;
  }

  // --warm_join: joins the first round once every worker of this node waits for it in
  // initialize() (or after the join timeout: they enter it when they get there), and hands
  // them its layout. False (the reason said) when the rendezvous failed.
  bool join_when_standing_by() {
    const bool waited_enough = std::chrono::steady_clock::now() - standby_since_ >= o_.rendezvous.join_timeout;
    if (live_->standing_by(o_.nproc_per_node) < o_.nproc_per_node && !waited_enough) return true;
    standby_ = false;
    if (!join("new", "")) return false;
    live_->publish(layout_);
    return true;
  }

  // --warm_join: the workers ended before this node joined any round.
  int ended_standing_by(const SupervisorResult& result) {
    std::fputs(result.summary.c_str(), stderr);
    say(name_, "the workers ended before this node joined a round (--warm_join starts them first: their first "
               "kindling::dist::initialize() waits for the round); a program that ends or fails before it "
               "initializes never joins. See its output above, or drop --warm_join");
    return result.exit_code != 0 ? result.exit_code : 1;
  }

  // Live recovery: announces the next round to the workers, joins it and hands them its layout.
  // False (the reason said) when the rendezvous failed.
  bool join_live(const std::string& reason, const std::string& detail) {
    live_->announce(layout_.round + 1);
    if (!join(reason, detail)) return false;
    live_->publish(layout_);
    kept_through_round_ = true;
    return true;
  }

  // Live recovery, the rendezvous silent while the workers run (this host cut off, or the
  // serving one): connects again, trying until the join timeout, and joins the next round as
  // a node that arrives, with the workers kept (the others went on without this node if it was
  // cut off, and take it back). False, the workers to be stopped, when it cannot be reached.
  bool reach_again() {
    say(name_, "the rendezvous at " + link_.where() +
                   " did not answer for 10 s while the workers run (this host or the serving one cut off?); "
                   "connecting again for up to the join timeout, the workers kept (live recovery)");
    std::string error;
    if (!link_.open(error)) {
      rendezvous_failure_ =
          "lost the rendezvous at " + link_.where() + " while the workers ran and could not reach it again: " + error;
      say(name_, rendezvous_failure_);
      return false;
    }
    return join_live("live", "");
  }

  const ElasticAgentOptions& o_;
  const std::function<std::vector<WorkerSpec>(const RoundLayout&)>& make_workers_;
  const SupervisorOptions& supervisor_;
  const std::string name_;
  AgentLink link_;
  const std::string host_;
  ErrorFolder folder_;
  std::optional<LiveChannel> live_;
  RoundLayout layout_;
  int last_exit_ = 0;
  bool linked_ = true;
  bool said_not_taking_part_ = false;
  bool kept_through_round_ = false;  // this attempt's workers were kept through a new round
  bool standby_ = false;             // --warm_join: the workers run, the node has joined no round yet
  std::chrono::steady_clock::time_point standby_since_;
  std::string why_stopped_;         // what the server said with its request to stop, if anything
  std::string rendezvous_failure_;  // why the rendezvous ended this node's part
};

}  // namespace

int run_elastic_agent(const ElasticAgentOptions& o,
                      const std::function<std::vector<WorkerSpec>(const RoundLayout&)>& make_workers,
                      const SupervisorOptions& supervisor) {
  ElasticAgentOptions options = o;
  // Live recovery: a round need not wait its last call once the lost members are known gone.
  options.rendezvous.close_when_members_known = o.live_recovery;
  return ElasticAgent(options, make_workers, supervisor).run();
}

}  // namespace supervisor
}  // namespace kindling
