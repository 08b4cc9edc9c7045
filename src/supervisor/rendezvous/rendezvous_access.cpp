// The fixed-endpoint access to the rendezvous, and what every access shares (see
// rendezvous_access.h).
#include "supervisor/rendezvous/rendezvous_access.h"

#include <netdb.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <random>
#include <thread>


namespace kindling {
namespace supervisor {

namespace {

using Clock = std::chrono::steady_clock;

// How long a host name is tried again while the resolver fails for the time being (a DNS server
// that does not answer): the bound kindling::dist::initialize gives MASTER_ADDR.
constexpr auto kResolverLimit = std::chrono::seconds(30);

}  // namespace

std::string unresolvable(const std::vector<std::string>& hosts, const std::string& name) {
  const auto deadline = Clock::now() + kResolverLimit;
  for (bool said = false;; said = true) {
    std::string why, waiting;
    for (const auto& host : hosts) {
      addrinfo hints{};
      hints.ai_socktype = SOCK_STREAM;
      addrinfo* found = nullptr;
      const int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &found);
      if (rc == 0) ::freeaddrinfo(found);
      if (rc != EAI_AGAIN && rc != EAI_NONAME && rc != EAI_FAIL) return {};  // resolves, or left to connect
      if (rc == EAI_AGAIN) waiting = host;
      why += (why.empty() ? "" : "; ") + ("the endpoint host '" + host + "' ") +
             (rc == EAI_AGAIN ? "could not be resolved for " + std::to_string(kResolverLimit.count()) + " s (" +
                                    ::gai_strerror(rc) + "): this host's DNS server does not answer"
                              : std::string("does not resolve to an address (") + ::gai_strerror(rc) + ")");
    }
    if (waiting.empty() || Clock::now() >= deadline) {
      return why + ". Give --rdzv_endpoint " + (waiting.empty() ? "host names or addresses that every node resolves"
                                                                : "an IP address, or check this host's resolver "
                                                                  "(/etc/resolv.conf)");
    }
    // A DNS server that did not answer may answer again: tried for a while, as MASTER_ADDR is.
    if (!said) {
      say(name, "cannot resolve '" + waiting + "' yet (" + ::gai_strerror(EAI_AGAIN) + "); trying again for up to " +
                    std::to_string(kResolverLimit.count()) + " s");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
}

namespace {

// The agent of the endpoint's host serves the rendezvous; every agent connects to it.
class EndpointAccess : public RendezvousAccess {
 public:
  EndpointAccess(const ElasticAgentOptions& o, std::string name) : o_(o), name_(std::move(name)) {}

  // Connects, serving first when the endpoint is an address of this host that nobody serves
  // yet. Both are tried again while nobody answers: the serving agent may start later, and two
  // agents of one host that bind at the same moment can both fail to listen (both sockets are
  // bound before either listens).
  LineSocket connect(std::string& error) override {
    error = unresolvable({o_.endpoint_host}, name_);
    if (!error.empty()) return LineSocket();
    int listen_errno = 0;
    const char* advice = "Start the agent of that host, or check --rdzv_endpoint";
    return keep_trying(
        o_.rendezvous.join_timeout, name_, where(), advice, error, [&](std::string& problem, bool& done) {
          if (!server_) {
            const int listen_fd = listen_on(o_.endpoint_host, o_.endpoint_port);
            if (listen_fd >= 0) {
              server_ = std::make_unique<RendezvousServer>(listen_fd, o_.rendezvous);
              say(name_, "serving the rendezvous at " + where());
            }
            listen_errno = listen_fd >= 0 || errno == EADDRNOTAVAIL ? 0 : errno;
          }
          LineSocket s = LineSocket::connect(o_.endpoint_host, o_.endpoint_port, std::chrono::seconds(2), problem);
          if (!s.valid()) return s;
          done = true;
          return greeted(s, where(), listen_errno, problem) ? std::move(s) : LineSocket();
        });
  }
  bool movable() const override { return false; }
  bool serving() const override { return server_ != nullptr; }
  std::string where() const override { return o_.endpoint_host + ":" + std::to_string(o_.endpoint_port); }

 private:
  const ElasticAgentOptions& o_;
  std::string name_;
  std::unique_ptr<RendezvousServer> server_;
};

}  // namespace

void say(const std::string& name, const std::string& text) {
  std::fprintf(stderr, "%s: %s\n", name.c_str(), text.c_str());
  std::fflush(stderr);
}

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

LineSocket keep_trying(std::chrono::milliseconds limit, const std::string& name, const std::string& where,
                       const std::string& advice, std::string& error,
                       const std::function<LineSocket(std::string&, bool&)>& attempt) {
  const auto deadline = Clock::now() + limit;
  auto next_note = Clock::now() + std::chrono::seconds(10);
  std::mt19937 random(std::random_device{}() ^ static_cast<unsigned>(::getpid()));
  std::uniform_int_distribution<int> pause_ms(100, 600);
  while (true) {
    bool done = false;
    LineSocket s = attempt(error, done);
    if (done || s.valid()) return s;
    if (Clock::now() >= deadline) {
      error = "nobody answered within the join timeout (" + error + "). " + advice;
      return LineSocket();
    }
    if (Clock::now() >= next_note) {
      say(name, "waiting for the rendezvous at " + where + " (" + error + ")");
      next_note += std::chrono::seconds(10);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(pause_ms(random)));
  }
}

std::unique_ptr<RendezvousAccess> endpoint_access(const ElasticAgentOptions& options, const std::string& name) {
  return std::make_unique<EndpointAccess>(options, name);
}

}  // namespace supervisor
}  // namespace kindling
