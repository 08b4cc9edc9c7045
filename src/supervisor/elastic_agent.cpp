// One node's elastic agent (see elastic_agent.h): rounds of join, run, rejoin.
#include "supervisor/elastic_agent.h"

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <sstream>

#include "common/host.h"
#include "supervisor/elastic.h"
#include "supervisor/flight_verdict.h"
#include "supervisor/rendezvous_access.h"

namespace kindling {
namespace launch {

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

// "ROUND <round> <restarts> <node_rank> <nnodes> <offset> <world> <addr> <port> <instance> <hosts> [lost:...]"
bool parse_round(const std::string& line, RoundLayout& r, std::string& lost) {
  std::istringstream in(line);
  std::string word;
  in >> word >> r.round >> r.restarts >> r.node_rank >> r.nnodes >> r.rank_offset >> r.world_size >> r.master_addr >>
      r.master_port >> r.instance >> r.hosts;
  if (word != "ROUND" || !in) return false;
  std::getline(in >> std::ws, lost);
  if (lost.rfind("lost:", 0) == 0) lost = lost.substr(5);
  return true;
}

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
  return {{"RANK", std::to_string(layout.rank_offset + local)},
          {"LOCAL_RANK", std::to_string(local)},
          {"WORLD_SIZE", std::to_string(layout.world_size)},
          {"LOCAL_WORLD_SIZE", std::to_string(nproc)},
          {"GROUP_RANK", std::to_string(layout.node_rank)},
          {"GROUP_WORLD_SIZE", std::to_string(layout.nnodes)},
          {"MASTER_ADDR", layout.master_addr},
          {"MASTER_PORT", std::to_string(layout.master_port)}};
}

std::string parse_endpoint(const std::string& text, std::string& host, int& port) {
  std::string name = text, number;
  if (!text.empty() && text[0] == '[') {
    const auto close = text.find(']');
    if (close == std::string::npos) return "'" + text + "' lacks its ']'";
    name = text.substr(1, close - 1);
    if (close + 1 < text.size() && text[close + 1] == ':') number = text.substr(close + 2);
  } else if (const auto colon = text.rfind(':'); colon != std::string::npos && text.find(':') == colon) {
    name = text.substr(0, colon);
    number = text.substr(colon + 1);
    if (number.empty()) return "'" + text + "' has an empty port";
  }
  if (name.empty()) return "needs a host, got '" + text + "'";
  if (!number.empty()) {
    const bool digits = number.size() <= 5 && number.find_first_not_of("0123456789") == std::string::npos;
    const int value = digits ? std::stoi(number) : 0;
    if (value < 1 || value > 65535) return "port must be between 1 and 65535, got '" + number + "'";
    port = value;
  }
  host = name;
  return {};
}

int run_elastic_agent(const ElasticAgentOptions& o,
                      const std::function<std::vector<WorkerSpec>(const RoundLayout&)>& make_workers,
                      const SupervisorOptions& supervisor) {
  const std::string& name = supervisor.name;
  const RendezvousSettings& settings = o.rendezvous;
  AgentLink link(o.etcd_endpoints.empty() ? endpoint_access(o, name) : etcd_access(o, name), name);
  std::string error;
  if (!link.open(error)) {
    say(name, "cannot reach the rendezvous at " + link.where() + ": " + error);
    return 1;
  }
  const std::string host = ::kindling::detail::host_name("unknown-host");
  ErrorFolder folder;
  std::string reason = "new", detail;
  int last_exit = 0;
  for (int attempt = 0;; ++attempt) {
    const auto join = [&] {
      return "JOIN " + settings.run_id + " " + reason + " " + std::to_string(o.nproc_per_node) + " " +
             std::to_string(find_free_port()) + " " + host + (link.serving() ? " 1" : " 0") +
             (detail.empty() ? "" : " " + detail);
    };
    const auto reply = link.ask(join, settings.join_timeout + settings.last_call + std::chrono::seconds(60));
    RoundLayout layout;
    std::string lost;
    if (!reply || reply->rfind("FAIL ", 0) == 0 || !parse_round(*reply, layout, lost)) {
      say(name, !reply ? "lost the rendezvous at " + link.where() + " (its host's agent ended or cannot be reached)"
                : reply->rfind("FAIL ", 0) == 0 ? reply->substr(5)
                                                : "unexpected rendezvous reply '" + reply->substr(0, 120) + "'");
      return last_exit != 0 ? last_exit : 1;
    }
    link.member_of(layout.round, layout.node_rank);
    say(name, describe(layout, o.nproc_per_node, lost));
    std::vector<WorkerSpec> specs = make_workers(layout);
    const AttemptFiles files = prepare_attempt(specs, attempt, layout.restarts, settings.max_restarts,
                                               {settings.run_id, layout.instance}, folder);
    SupervisorOptions options = supervisor;
    options.flight_record_folder = files.flight_folder;
    bool linked = true;
    std::string why_stopped;  // what the server said with its request to stop, if anything
    options.stop_check = [&]() {
      if (!linked) return false;
      const auto answer = link.ask([] { return std::string("POLL"); }, std::chrono::seconds(10));
      if (!answer || answer->rfind("WAITING ", 0) != 0) {
        linked = false;
        say(name, "lost the rendezvous while the workers run; they go on, but this node cannot rejoin a next round");
        return false;
      }
      const auto lost = answer->find(" lost: ");
      why_stopped = lost == std::string::npos ? "" : answer->substr(lost + 7);
      return std::atoi(answer->c_str() + 8) > 0;
    };
    const SupervisorResult result = supervise(specs, options);
    const std::string flight = result.exit_code != 0 ? flight_line(files) : std::string();
    remove_empty_flight_folders(files.flight_folder);
    if (result.received_signal != 0) {
      std::fputs(result.summary.c_str(), stderr);
      return result.exit_code;
    }
    if (result.exit_code == 0 && !result.stopped_on_request) {
      link.send("DONE");
      link.finished();
      return 0;
    }
    if (result.exit_code != 0) {
      std::fputs((result.summary + flight).c_str(), stderr);
      reason = "failed";
      detail = failure_line(result, files.error_files);
      last_exit = result.exit_code;
    } else {
      say(name, why_stopped.empty()
                    ? "a node waits for the next rendezvous round; stopped this node's workers to join it"
                    : "a node of the running round was lost (" + why_stopped +
                          "); stopped this node's workers to join the next round");
      reason = "stopped";
      detail.clear();
    }
    if (!linked) return last_exit != 0 ? last_exit : 1;
  }
}

}  // namespace launch
}  // namespace kindling
