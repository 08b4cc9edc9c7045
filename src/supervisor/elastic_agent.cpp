// One node's elastic agent (see elastic_agent.h): rounds of join, run, rejoin.
#include "supervisor/elastic_agent.h"

#include <netdb.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <cstdio>
#include <memory>
#include <random>
#include <sstream>
#include <thread>

#include "common/host.h"
#include "supervisor/elastic.h"
#include "supervisor/flight_verdict.h"

namespace kindling {
namespace launch {

namespace {

using Clock = std::chrono::steady_clock;

void say(const std::string& name, const std::string& text) {
  std::fprintf(stderr, "%s: %s\n", name.c_str(), text.c_str());
  std::fflush(stderr);
}

// Connects to the rendezvous, serving it first when the endpoint is an address of this host
// that nobody serves yet. Both are tried again while nobody answers: the serving agent may
// start later, and two agents of one host that bind at the same moment can both fail to
// listen (both sockets are bound before either listens). Retries are spread at random so
// that such agents do not meet again; every 10 s the agent says what it waits for.
// Empty when `host` resolves or may resolve later (a temporary failure), else why it never
// will: waiting the join timeout for a name that does not exist helps nobody.
std::string unresolvable(const std::string& host) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &found);
  if (rc == 0) ::freeaddrinfo(found);
  if (rc != EAI_NONAME && rc != EAI_FAIL) return {};
  return "the endpoint host '" + host + "' does not resolve to an address (" + ::gai_strerror(rc) +
         "); give --rdzv_endpoint a host name or address that every node resolves";
}

// Whether the program that accepted `s` greets as a kindling-run rendezvous within 5 s; else
// `error` says who holds the port.
bool greeted(LineSocket& s, const std::string& where, int listen_errno, std::string& error) {
  const auto hello = s.receive(Clock::now() + std::chrono::seconds(5));
  if (hello && *hello == kRendezvousGreeting) return true;
  error = "the program listening at " + where + " is not a kindling-run rendezvous (it " +
          (hello ? "answered '" + hello->substr(0, 60) + "'" : std::string("said nothing within 5 s")) + ")" +
          (listen_errno != 0
               ? std::string("; this host could not listen there either (") + std::strerror(listen_errno) + ")"
               : std::string()) +
          ". Another program holds the port: give --rdzv_endpoint a free port (the same on every node)";
  return false;
}

LineSocket reach_rendezvous(const ElasticAgentOptions& o, const std::string& name,
                            std::unique_ptr<RendezvousServer>& server, std::string& error) {
  const std::string where = o.endpoint_host + ":" + std::to_string(o.endpoint_port);
  error = unresolvable(o.endpoint_host);
  if (!error.empty()) return LineSocket();
  const auto deadline = Clock::now() + o.rendezvous.join_timeout;
  int listen_errno = 0;
  auto next_note = Clock::now() + std::chrono::seconds(10);
  std::mt19937 random(std::random_device{}() ^ static_cast<unsigned>(::getpid()));
  std::uniform_int_distribution<int> pause_ms(100, 600);
  while (true) {
    if (!server) {
      const int listen_fd = listen_on(o.endpoint_host, o.endpoint_port);
      if (listen_fd >= 0) {
        server = std::make_unique<RendezvousServer>(listen_fd, o.rendezvous);
        say(name, "serving the rendezvous at " + where);
      }
      listen_errno = listen_fd >= 0 || errno == EADDRNOTAVAIL ? 0 : errno;
    }
    LineSocket s = LineSocket::connect(o.endpoint_host, o.endpoint_port, std::chrono::seconds(2), error);
    if (s.valid()) return greeted(s, where, listen_errno, error) ? std::move(s) : LineSocket();
    if (Clock::now() >= deadline) {
      error = "nobody answered within the join timeout (" + error +
              "). Start the agent of that host, or check "
              "--rdzv_endpoint";
      return s;
    }
    if (Clock::now() >= next_note) {
      say(name, "waiting for the rendezvous at " + where + " (" + error + ")");
      next_note += std::chrono::seconds(10);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(pause_ms(random)));
  }
}

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
  std::unique_ptr<RendezvousServer> server;
  std::string error;
  LineSocket link = reach_rendezvous(o, name, server, error);
  if (!link.valid()) {
    say(name,
        "cannot reach the rendezvous at " + o.endpoint_host + ":" + std::to_string(o.endpoint_port) + ": " + error);
    return 1;
  }
  const std::string host = ::kindling::detail::host_name("unknown-host");
  ErrorFolder folder;
  std::string reason = "new", detail;
  int last_exit = 0;
  for (int attempt = 0;; ++attempt) {
    link.send("JOIN " + settings.run_id + " " + reason + " " + std::to_string(o.nproc_per_node) + " " +
              std::to_string(find_free_port()) + " " + host + (server ? " 1" : " 0") +
              (detail.empty() ? "" : " " + detail));
    const auto reply =
        link.receive(Clock::now() + settings.join_timeout + settings.last_call + std::chrono::seconds(60));
    RoundLayout layout;
    std::string lost;
    if (!reply || reply->rfind("FAIL ", 0) == 0 || !parse_round(*reply, layout, lost)) {
      say(name, !reply ? "lost the rendezvous at " + o.endpoint_host + ":" + std::to_string(o.endpoint_port) +
                             " (its host's agent ended or cannot be reached)"
                : reply->rfind("FAIL ", 0) == 0 ? reply->substr(5)
                                                : "unexpected rendezvous reply '" + reply->substr(0, 120) + "'");
      return last_exit != 0 ? last_exit : 1;
    }
    say(name, describe(layout, o.nproc_per_node, lost));
    std::vector<WorkerSpec> specs = make_workers(layout);
    const AttemptFiles files = prepare_attempt(specs, attempt, layout.restarts, settings.max_restarts,
                                               {settings.run_id, layout.instance}, folder);
    SupervisorOptions options = supervisor;
    options.flight_record_folder = files.flight_folder;
    bool linked = true;
    options.stop_check = [&]() {
      if (!linked) return false;
      const auto answer = link.send("POLL") ? link.receive(Clock::now() + std::chrono::seconds(10)) : std::nullopt;
      if (!answer || answer->rfind("WAITING ", 0) != 0) {
        linked = false;
        say(name, "lost the rendezvous while the workers run; they go on, but this node cannot rejoin a next round");
        return false;
      }
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
      return 0;
    }
    if (result.exit_code != 0) {
      std::fputs((result.summary + flight).c_str(), stderr);
      reason = "failed";
      detail = failure_line(result, files.error_files);
      last_exit = result.exit_code;
    } else {
      say(name, "a node waits for the next rendezvous round; stopped this node's workers to join it");
      reason = "stopped";
      detail.clear();
    }
    if (!linked) return last_exit != 0 ? last_exit : 1;
  }
}

}  // namespace launch
}  // namespace kindling
