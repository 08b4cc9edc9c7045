// The rendezvous on an etcd cluster (--rdzv_backend etcd; see rendezvous_access.h). The agents
// elect one of themselves in etcd: the first to create the leader key (attached to its lease,
// kept alive every third of its TTL) serves the rounds on a port of its own host and writes
// there where that is. The rounds' state (round, restarts, members, the job's instance) is
// written to etcd before any agent hears of a change, under a second lease of the leader's.
// When the serving agent is lost its lease expires, the key goes, another agent creates it,
// starts a server from the state in etcd, and the agents connect to it and say which node of
// which round they were. A cluster of 3 members survives the loss of any one, so no single
// host ends the job. Keys: /kindling/rdzv/<run_id>/{leader,state}.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <thread>

#include "common/host.h"
#include "supervisor/rendezvous/etcd_client.h"
#include "supervisor/rendezvous/rendezvous_access.h"

namespace kindling {
namespace supervisor {

namespace {

using Clock = std::chrono::steady_clock;

// How long the rounds' state outlives the last serving agent: long enough for another agent to
// take over, short enough that a job started again under the same --rdzv_id after every agent
// was killed starts afresh a minute later (a job that ends well removes it at once).
constexpr int kStateLeaseSeconds = 60;
constexpr auto kRequestLimit = std::chrono::seconds(2);
// What a member that fails a request is asked (GET /version, which an etcd member answers
// without its cluster), how long it may take to answer, and how long members that accept
// connections but answer nothing are waited for: an etcd member that waits for the other
// members of its cluster does that too, so silence is not refused at once.
constexpr auto kProbeLimit = std::chrono::seconds(5);
constexpr auto kSilentLimit = std::chrono::seconds(30);

// What a program that is not an etcd member answered to GET /version, and what to do.
std::string what_answered(const EtcdProbe& p) {
  const std::string first = p.reply.substr(0, p.reply.find_first_of("\r\n"));
  if (p.reply.rfind(kRendezvousGreeting, 0) == 0) {
    return "is a kindling-run rendezvous of --rdzv_backend c10d (it greeted '" + first +
           "'): the nodes were given different --rdzv_backend; give every node the same --rdzv_backend and "
           "--rdzv_endpoint";
  }
  const std::string answer =
      p.status > 0 ? "answered HTTP " + std::to_string(p.status) + " ('" + first.substr(0, 80) + "')"
      : p.reply.empty() ? "closed the connection without an answer (" + p.error + ")"
                        : "answered '" + first.substr(0, 80) + "', which is not HTTP";
  return answer + " to GET /version, which an etcd member answers with its version; give --rdzv_endpoint the "
                  "client address of each etcd member (port 2379 unless the members were set otherwise)";
}

std::string state_text(const RendezvousState& s) {
  return nlohmann::json{{"round", s.round},          {"restarts", s.restarts},    {"instance", s.instance},
                        {"members", s.last_members}, {"refusal", s.last_refusal}, {"failure", s.failure}}
      .dump();
}

RendezvousState state_from(const std::string& text) {
  const auto j = nlohmann::json::parse(text, nullptr, false);
  RendezvousState s;
  if (j.is_discarded() || !j.is_object()) return s;
  s.round = j.value("round", -1);
  s.restarts = j.value("restarts", 0);
  s.instance = j.value("instance", "");
  s.last_members = j.value("members", std::vector<std::string>{});
  s.last_refusal = j.value("refusal", "");
  s.failure = j.value("failure", "");
  return s;
}

int bound_port(int fd) {
  sockaddr_storage address{};
  socklen_t size = sizeof(address);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &size) != 0) return 0;
  const auto* v4 = reinterpret_cast<const sockaddr_in*>(&address);
  return ntohs(v4->sin_port);
}

class EtcdAccess : public RendezvousAccess {
 public:
  EtcdAccess(const ElasticAgentOptions& o, std::string name)
      : o_(o),
        name_(std::move(name)),
        leader_key_("/kindling/rdzv/" + o.rendezvous.run_id + "/leader"),
        state_key_("/kindling/rdzv/" + o.rendezvous.run_id + "/state"),
        client_(o.etcd_endpoints, kRequestLimit) {}

  ~EtcdAccess() override {
    std::unique_ptr<RendezvousServer> server = take_server();
    // A job that ended well waits for the other agents' DONE; otherwise another agent takes
    // over at once (its connections close, the leader key goes with the lease below).
    if (server && !finished_) server->abandon();
    server.reset();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    if (keeper_.joinable()) keeper_.join();
    try {
      if (lease_ != 0) client_.revoke(lease_);
      if (finished_ && state_lease_ != 0) client_.revoke(state_lease_);  // the state key goes with it
    } catch (const EtcdError&) {
      // Nothing to undo: the leases expire by themselves.
    }
  }

  LineSocket connect(std::string& error) override {
    if (!names_checked_) {  // a name that does not exist, or a DNS server that does not answer
      names_checked_ = true;
      std::vector<std::string> hosts;
      for (const auto& member : o_.etcd_endpoints) {
        const bool v6 = member[0] == '[';
        hosts.push_back(v6 ? member.substr(1, member.find(']') - 1) : member.substr(0, member.rfind(':')));
      }
      error = unresolvable(hosts, name_);
      if (!error.empty()) return LineSocket();
    }
    const char* advice =
        "Start the etcd cluster (or check the members given to --rdzv_endpoint) and the other nodes' agents";
    return keep_trying(o_.rendezvous.join_timeout, name_, where(), advice, error,
                       [&](std::string& problem, bool& done) {
                         try {
                           return try_connect(problem);
                         } catch (const EtcdError& e) {
                           problem = e.what();
                           identify(problem, done);
                           return LineSocket();
                         }
                       });
  }
  bool movable() const override { return true; }
  bool serving() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return server_ != nullptr;
  }
  std::string where() const override {
    std::string list;
    for (const auto& e : o_.etcd_endpoints) list += (list.empty() ? "" : ",") + e;
    return "the etcd cluster " + list;
  }
  void finished() override { finished_ = true; }

 private:
  LineSocket try_connect(std::string& problem, bool retried = false) {
    if (lost_.exchange(false)) {
      take_server().reset();  // already abandoned by the keeper
      lease_ = 0;
    }
    if (lease_ == 0) start_lease();
    auto leader = client_.get(leader_key_);
    if (!leader || leader->value != own_value_) {
      // This agent's server, if any, serves no more: its key expired or another agent's replaced it.
      if (auto old = take_server()) old->abandon();
    }
    if (!leader) {
      campaign();
      leader = client_.get(leader_key_);
    }
    if (!leader) {
      problem = "no agent serves the rendezvous yet";
      return LineSocket();
    }
    const auto space = leader->value.rfind(' ');
    const std::string host = leader->value.substr(0, space);
    const int port = space == std::string::npos ? 0 : std::atoi(leader->value.c_str() + space + 1);
    bool refused = false;
    LineSocket s = LineSocket::connect(host, port, std::chrono::seconds(2), problem, &refused);
    if (!s.valid() && refused && !retried) return take_over_from(*leader, host, port, problem);
    if (!s.valid()) {
      problem = "the serving agent at " + host + ":" + std::to_string(port) + " does not answer (" + problem +
                "); another takes over when its lease of " + std::to_string(o_.etcd_lease_seconds) + " s expires";
      return s;
    }
    if (!greeted(s, host + ":" + std::to_string(port), 0, problem)) return LineSocket();
    served_by_ = host;
    replaced_address_.clear();  // said only to the server elected right after the refusal
    return s;
  }

  // The serving agent's port refused the connection: its host answers and nothing listens
  // there, so its process is gone (a server that gave up serving also gave up its key). Its
  // key is removed now rather than left until its lease expires (only while it is still the
  // same key: another agent may have done it and taken over already), and this agent tries
  // once more at once, campaigning if nobody serves. The server elected then need not wait
  // for the lost agent's node (RendezvousState::replaced_address).
  LineSocket take_over_from(const EtcdValue& leader, const std::string& host, int port, std::string& problem) {
    replaced_address_ = host;
    if (client_.remove_if_unchanged(leader_key_, leader.mod_revision))
      say(name_, "the serving agent at " + host + ":" + std::to_string(port) +
                     " refuses connections (its process is gone): its place in etcd is given up without waiting "
                     "for its lease");
    return try_connect(problem, true);
  }

  // After a request that no member answered as etcd does, until one has: asks each member what
  // it is. Sets `done` with `problem` when one is another program (an HTTP server, a kindling-run
  // c10d rendezvous), or when members have accepted connections and answered nothing for
  // kSilentLimit.
  void identify(std::string& problem, bool& done) {
    if (etcd_seen_ || !client_.local_address().empty()) return;  // a member has answered a request
    std::string others, silent;
    for (std::size_t i = 0; i < o_.etcd_endpoints.size(); ++i) {
      const EtcdProbe p = client_.probe(i, kProbeLimit);
      etcd_seen_ = p.etcd();
      if (etcd_seen_ || !client_.local_address().empty()) return;  // a member has answered a request
      const std::string& member = o_.etcd_endpoints[i];
      // A listener that accepts nothing fills its queue of connections: then they time out.
      was_silent_.resize(o_.etcd_endpoints.size());
      was_silent_[i] = p.silent() || (was_silent_[i] && !p.connected && !p.error.empty());
      if (was_silent_[i]) {
        silent += (silent.empty() ? "" : ", ") + member;
      } else if (p.connected) {
        others += (others.empty() ? "" : "; ") + member + " " + what_answered(p);
      }
    }
    if (!others.empty()) {
      done = true;
      problem = "--rdzv_backend etcd: not an etcd member: " + others;
      return;
    }
    if (silent.empty()) return silent_since_.reset();
    if (!silent_since_) silent_since_ = Clock::now();
    problem += "; " + silent + " accepted the connection but answered nothing";
    if (Clock::now() - *silent_since_ < kSilentLimit) return;
    done = true;
    problem = "--rdzv_backend etcd: " + silent + " accepted connections but answered nothing to etcd's GET /version for " +
              std::to_string(kSilentLimit.count()) +
              " s: not an etcd member (check the ports given to --rdzv_endpoint: etcd's client port, 2379 unless set "
              "otherwise), or etcd members that wait for the other members of their cluster (start those)";
  }

  // A lease kept alive by a thread of its own (with its own client) every third of its TTL.
  void start_lease() {
    if (keeper_.joinable()) {
      {
        std::lock_guard<std::mutex> lock(mutex_);
        stopping_ = true;
      }
      wake_.notify_all();
      keeper_.join();
      stopping_ = false;
    }
    lease_ = client_.grant(o_.etcd_lease_seconds);
    keeper_ = std::thread([this, lease = lease_] { keep(lease); });
  }

  void keep(int64_t lease) {
    EtcdClient client(o_.etcd_endpoints, kRequestLimit);
    const auto period = std::chrono::milliseconds(o_.etcd_lease_seconds * 1000 / 3);
    auto renewed = Clock::now();
    std::unique_lock<std::mutex> lock(mutex_);
    while (!wake_.wait_for(lock, period, [&] { return stopping_; })) {
      lock.unlock();
      bool alive = true;
      try {
        alive = client.keep_alive(lease);
        if (alive) renewed = Clock::now();
        const int64_t state_lease = state_lease_;
        if (state_lease != 0) client.keep_alive(state_lease);
      } catch (const EtcdError&) {
        alive = Clock::now() - renewed < std::chrono::seconds(o_.etcd_lease_seconds);
      }
      lock.lock();
      if (!alive) {
        // Another agent may serve now: stop serving, so that no agent is served twice.
        if (server_) server_->abandon();
        lost_ = true;
        return;
      }
    }
  }

  // Tries to become the serving agent: listen on a free port, then create the leader key.
  void campaign() {
    const int fd = listen_on("0.0.0.0", 0);
    if (fd < 0) return;
    std::string address = client_.local_address();
    if (address.empty() || address.rfind("127.", 0) == 0 || address == "::1")
      address = ::kindling::detail::host_name("localhost");
    own_value_ = address + " " + std::to_string(bound_port(fd));
    if (!client_.create(leader_key_, own_value_, lease_)) {
      ::close(fd);
      return;
    }
    const auto saved = client_.get(state_key_);
    RendezvousState state = saved ? state_from(saved->value) : RendezvousState{};
    // The server replaced: the one whose port refused this agent, else the last one it was
    // served by (its key is gone: removed after such a refusal, or expired with its lease, so
    // its agent serves no more). Its node is then not waited for (RendezvousState).
    const std::string own_address = own_value_.substr(0, own_value_.rfind(' '));
    state.replaced_address = !replaced_address_.empty() ? replaced_address_
                             : served_by_ != own_address ? served_by_
                                                         : std::string();
    if (state_lease_ == 0) state_lease_ = client_.grant(kStateLeaseSeconds);
    auto writer = std::make_shared<std::unique_ptr<EtcdClient>>();
    auto save = [this, writer, lease = state_lease_.load()](const RendezvousState& s) {
      try {
        if (!*writer) *writer = std::make_unique<EtcdClient>(o_.etcd_endpoints, kRequestLimit);
        (*writer)->put(state_key_, state_text(s), lease);
      } catch (const EtcdError& e) {
        say(name_, std::string("could not write the rendezvous state to etcd: ") + e.what());
      }
    };
    if (saved) client_.put(state_key_, saved->value, state_lease_);  // now under this agent's lease
    std::lock_guard<std::mutex> lock(mutex_);
    server_ = std::make_unique<RendezvousServer>(fd, o_.rendezvous, state, save);
    say(name_, "serving the rendezvous at " + own_value_ + " (elected in " + where() + ")" +
                   (saved ? ", from round " + std::to_string(state.round) + " of the agent it replaces" : ""));
  }

  std::unique_ptr<RendezvousServer> take_server() {
    std::lock_guard<std::mutex> lock(mutex_);
    return std::move(server_);
  }

  const ElasticAgentOptions& o_;
  std::string name_;
  const std::string leader_key_, state_key_;
  EtcdClient client_;  // the agent's thread only
  int64_t lease_ = 0;
  std::atomic<int64_t> state_lease_{0};
  std::string own_value_;  // "address port" of this agent's server
  std::string replaced_address_;  // of the last serving agent whose port refused this one (take_over_from)
  std::string served_by_;         // the address of the last serving agent this one was connected to
  bool finished_ = false;
  bool names_checked_ = false;
  bool etcd_seen_ = false;                        // a member answered GET /version as etcd
  std::optional<Clock::time_point> silent_since_;  // members silent since (see identify)
  std::vector<bool> was_silent_;                   // by member: silent at the last probe
  std::atomic<bool> lost_{false};
  mutable std::mutex mutex_;  // server_, stopping_
  std::condition_variable wake_;
  bool stopping_ = false;
  std::unique_ptr<RendezvousServer> server_;
  std::thread keeper_;
};

}  // namespace

std::unique_ptr<RendezvousAccess> etcd_access(const ElasticAgentOptions& options, const std::string& name) {
  return std::make_unique<EtcdAccess>(options, name);
}

}  // namespace supervisor
}  // namespace kindling
