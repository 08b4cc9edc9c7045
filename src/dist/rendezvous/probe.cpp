// Rendezvous pre-checks (see probe.h).
#include "dist/rendezvous/probe.h"

#include <ifaddrs.h>
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

int connect_tcp(const std::string& host, int port) {
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
    int rc;
    do {
      rc = ::connect(fd, a->ai_addr, a->ai_addrlen);
    } while (rc != 0 && errno == EINTR);
    if (rc == 0) {
      connected = fd;
    } else {
      error = errno;
      ::close(fd);
    }
  }
  ::freeaddrinfo(found);
  if (connected < 0) errno = error;
  return connected;
}

bool wait_for_listener(const std::string& host, int port, std::chrono::steady_clock::time_point deadline) {
  for (;;) {
    const int fd = connect_tcp(host, port);
    if (fd >= 0) {
      ::close(fd);
      return true;
    }
    if (std::chrono::steady_clock::now() >= deadline) return false;
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
