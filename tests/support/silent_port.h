#pragma once
// A TCP port on loopback held by a program that never answers (the kernel accepts the
// connections for it): what another job's server looks like to a client that expects its
// own. Tests of "a port another program holds". Or, not listening, a port where nothing
// serves: every connection refused at once, and no other process can take the port meanwhile.
// Closed when destroyed.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <stdexcept>

namespace kindling {
namespace testing {

class SilentPort {
 public:
  /// `listen` false: bound only, so connections are refused. Throws std::runtime_error when no
  /// loopback port can be held.
  explicit SilentPort(bool listen = true) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
        (listen && ::listen(fd_, 16) != 0) || ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      if (fd_ >= 0) ::close(fd_);
      throw std::runtime_error("SilentPort: cannot hold a loopback port");
    }
    port_ = ntohs(addr.sin_port);
  }
  ~SilentPort() { ::close(fd_); }
  SilentPort(const SilentPort&) = delete;
  SilentPort& operator=(const SilentPort&) = delete;

  int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
};

}  // namespace testing
}  // namespace kindling
