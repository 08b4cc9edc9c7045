// A resetting TCP proxy for tests (see reset_proxy.h).
#include "support/reset_proxy.h"

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <stdexcept>
#include <utility>
#include <vector>

namespace kindling {
namespace testing {
namespace {

int connect_loopback(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (fd >= 0 && ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) return fd;
  if (fd >= 0) ::close(fd);
  return -1;
}

// Closes with an RST instead of a FIN.
void reset_close(int fd) {
  linger l{1, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
  ::close(fd);
}

// Moves what `from` has to `to`; false when `from` closed or failed.
bool pass(int from, int to) {
  char buf[65536];
  const ssize_t n = ::recv(from, buf, sizeof(buf), 0);
  if (n <= 0) return false;
  for (ssize_t sent = 0; sent < n;) {
    const ssize_t m = ::send(to, buf + sent, static_cast<size_t>(n - sent), MSG_NOSIGNAL);
    if (m <= 0) return false;
    sent += m;
  }
  return true;
}

}  // namespace

ResetProxy::ResetProxy(int target_port, std::string reset_marker)
    : target_port_(target_port), marker_(std::move(reset_marker)) {
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (listen_fd_ < 0 || ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::listen(listen_fd_, 64) != 0 || ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    if (listen_fd_ >= 0) ::close(listen_fd_);
    throw std::runtime_error("ResetProxy: cannot listen on 127.0.0.1");
  }
  port_ = ntohs(addr.sin_port);
  thread_ = std::thread([this] { serve(); });
}

ResetProxy::~ResetProxy() {
  stop_ = true;
  thread_.join();
  ::close(listen_fd_);
}

bool ResetProxy::resetting() const {
  struct stat st {};
  return ::stat(marker_.c_str(), &st) == 0;
}

// One thread polls the listener and every (client, target) pair: a proxy for a handful of
// test connections needs no more.
void ResetProxy::serve() {
  std::vector<std::pair<int, int>> pairs;  // (client side, target side)
  while (!stop_) {
    std::vector<pollfd> fds{{listen_fd_, POLLIN, 0}};
    for (const auto& p : pairs) {
      fds.push_back({p.first, POLLIN, 0});
      fds.push_back({p.second, POLLIN, 0});
    }
    ::poll(fds.data(), fds.size(), 50);
    const bool reset = resetting();
    if (fds[0].revents & POLLIN) {
      const int client = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      const int target = client >= 0 && !reset ? connect_loopback(target_port_) : -1;
      if (target >= 0) {
        pairs.emplace_back(client, target);
      } else if (client >= 0) {
        reset_close(client);
      }
    }
    std::vector<std::pair<int, int>> open;
    for (std::size_t i = 0; i < pairs.size(); ++i) {
      const auto& c = fds.size() > 1 + 2 * i + 1 ? fds[1 + 2 * i] : pollfd{};
      const auto& t = fds.size() > 1 + 2 * i + 1 ? fds[2 + 2 * i] : pollfd{};
      bool alive = !reset;
      if (alive && c.revents) alive = pass(pairs[i].first, pairs[i].second);
      if (alive && t.revents) alive = pass(pairs[i].second, pairs[i].first);
      if (alive) {
        open.push_back(pairs[i]);
      } else {
        reset_close(pairs[i].first);
        reset_close(pairs[i].second);
      }
    }
    pairs.swap(open);
  }
  for (const auto& p : pairs) {
    ::close(p.first);
    ::close(p.second);
  }
}

}  // namespace testing
}  // namespace kindling
