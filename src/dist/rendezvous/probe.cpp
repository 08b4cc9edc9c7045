// Rendezvous pre-checks (see probe.h).
#include "dist/rendezvous/probe.h"

#include <fcntl.h>
#include <ifaddrs.h>
#include <poll.h>
#include <net/if.h>
#include <netdb.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>

#include "kindling/error.h"
#include "kindling/log.h"

namespace kindling {
namespace dist {
namespace detail {
using ::kindling::detail::rank_prefix;

std::optional<std::string> source_address_towards(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), "9", &hints, &found) != 0 || found == nullptr) return std::nullopt;
  std::optional<std::string> out;
  for (addrinfo* a = found; a != nullptr && !out; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    sockaddr_storage local{};
    socklen_t length = sizeof(local);
    char text[NI_MAXHOST];
    if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &length) == 0 &&
        ::getnameinfo(reinterpret_cast<sockaddr*>(&local), length, text, sizeof(text), nullptr, 0, NI_NUMERICHOST) == 0)
      out = std::string(text);
    ::close(fd);
  }
  ::freeaddrinfo(found);
  return out;
}

std::vector<std::string> own_addresses() {
  std::vector<std::string> out;
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return out;
  for (ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr || !(i->ifa_flags & IFF_UP) || (i->ifa_flags & IFF_LOOPBACK)) continue;
    const int family = i->ifa_addr->sa_family;
    if (family != AF_INET && family != AF_INET6) continue;
    char text[NI_MAXHOST];
    const socklen_t length = family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
    if (::getnameinfo(i->ifa_addr, length, text, sizeof(text), nullptr, 0, NI_NUMERICHOST) != 0) continue;
    const std::string address = text;
    if (address.rfind("fe80", 0) == 0) continue;  // link-local: not for a job's traffic
    out.push_back(address);
  }
  ::freeifaddrs(list);
  return out;
}

bool is_loopback_address(const std::string& address) { return address.rfind("127.", 0) == 0 || address == "::1"; }

void check_resolvable(const std::string& host, const std::string& what, std::chrono::milliseconds limit) {
  KINDLING_CHECK(!host.empty(), rank_prefix(), "kindling::dist::initialize: ", what,
                 " is empty; set it to the host name or address of the machine that runs rank 0");
  const auto deadline = std::chrono::steady_clock::now() + limit;
  for (;;) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    const int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &found);
    if (found) ::freeaddrinfo(found);
    if (rc == 0) return;
    const bool temporary = rc == EAI_AGAIN;
    if (!temporary || std::chrono::steady_clock::now() >= deadline) {
      throw UsageError(rank_prefix() + "kindling::dist::initialize: " + what + "='" + host +
                       "' does not resolve to an address (" + ::gai_strerror(rc) +
                       "). Set it to the host name or IP address of the machine that runs rank 0, as every rank "
                       "can resolve it");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
}

void check_store_folder(const std::string& path, const std::string& init_method) {
  const auto slash = path.rfind('/');
  const std::string folder = slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
  struct stat st {};
  const bool ok = ::stat(folder.c_str(), &st) == 0;
  KINDLING_CHECK(ok && S_ISDIR(st.st_mode), rank_prefix(), "kindling::dist::initialize: the folder '", folder,
                 "' of init_method '", init_method, "' ", ok ? "is not a folder" : "does not exist",
                 "; create it on a file system that every rank sees (the store file itself is created by the "
                 "ranks)");
}

namespace {

// connect(2) bounded by `limit`: 0 or an errno value.
int connect_bounded(int fd, const sockaddr* address, socklen_t length, std::chrono::milliseconds limit) {
  const int flags = ::fcntl(fd, F_GETFL, 0);
  ::fcntl(fd, F_SETFL, flags | O_NONBLOCK);
  int error = 0;
  if (::connect(fd, address, length) != 0) {
    error = errno;
    if (error == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      int ready;
      do {
        ready = ::poll(&p, 1, static_cast<int>(limit.count()));
      } while (ready < 0 && errno == EINTR);
      socklen_t size = sizeof(error);
      if (ready == 0) {
        error = ETIMEDOUT;
      } else if (ready < 0 || ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &size) != 0) {
        error = errno;
      }
    }
  }
  ::fcntl(fd, F_SETFL, flags);
  return error;
}

// The first address `host` resolves to, numeric ("" when it does not resolve).
std::string first_address(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), nullptr, &hints, &found) != 0 || found == nullptr) return "";
  char text[NI_MAXHOST] = {0};
  ::getnameinfo(found->ai_addr, found->ai_addrlen, text, sizeof(text), nullptr, 0, NI_NUMERICHOST);
  ::freeaddrinfo(found);
  return text;
}

}  // namespace

int connect_tcp(const std::string& host, int port, std::chrono::milliseconds limit) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0) {
    errno = EHOSTUNREACH;
    return -1;
  }
  int connected = -1;
  int error = ECONNREFUSED;
  for (addrinfo* a = found; a != nullptr && connected < 0; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      error = errno;
      continue;
    }
    error = connect_bounded(fd, a->ai_addr, a->ai_addrlen, limit);
    if (error == 0) {
      connected = fd;
    } else {
      ::close(fd);
    }
  }
  ::freeaddrinfo(found);
  if (connected < 0) errno = error;
  return connected;
}

bool wait_for_listener(const std::string& host, int port, std::chrono::steady_clock::time_point deadline,
                       std::chrono::milliseconds silent_limit, const std::atomic<bool>* given_up) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  auto silent_since = start, next_note = start + std::chrono::seconds(10);
  for (;;) {
    const int fd = connect_tcp(host, port);
    if (fd >= 0) {
      ::close(fd);
      return true;
    }
    const int error = errno;
    const auto now = Clock::now();
    if (error == ECONNREFUSED) silent_since = now;  // the host answered: up, the store not yet
    const std::string where = host + ":" + std::to_string(port) + " (" + first_address(host) + ")";
    const double silent_s = std::chrono::duration<double>(now - silent_since).count();
    if (now - silent_since >= silent_limit) {
      throw CommunicationError(rank_prefix() + "kindling::dist::initialize: the host of the rendezvous store, " +
                               where + ", has not answered for " + std::to_string(static_cast<int>(silent_s)) +
                               " s (" + std::strerror(error) +
                               "): rank 0's host is down, cut off from this host, or a firewall drops the port. Check "
                               "MASTER_ADDR and the network between the hosts");
    }
    if (now >= deadline) return false;
    if (given_up != nullptr && given_up->load())
      throw CommunicationError(rank_prefix() + "kindling::dist::initialize: the world being made was given up for a "
                               "newer rendezvous round while waiting for the store at " + where);
    if (now >= next_note) {
      next_note = now + std::chrono::seconds(10);
      log(LogLevel::kWarning,
          "kindling::dist::initialize: waiting " + std::to_string(static_cast<int>(
                                                        std::chrono::duration<double>(now - start).count())) +
              " s for the rendezvous store at " + where + ": " + std::strerror(error));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

bool run_bounded(std::function<void()> connect, std::chrono::milliseconds limit) {
  struct State {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    std::exception_ptr error;
  };
  auto state = std::make_shared<State>();
  std::thread([state, connect = std::move(connect)] {
    std::exception_ptr error;
    try {
      connect();
    } catch (...) {
      error = std::current_exception();
    }
    std::lock_guard<std::mutex> lock(state->mu);
    state->done = true;
    state->error = error;
    state->cv.notify_all();
  }).detach();
  std::unique_lock<std::mutex> lock(state->mu);
  if (!state->cv.wait_for(lock, limit, [&] { return state->done; })) return false;
  if (state->error) std::rethrow_exception(state->error);
  return true;
}

}  // namespace detail
}  // namespace dist
}  // namespace kindling
