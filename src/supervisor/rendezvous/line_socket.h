#pragma once
// A TCP connection that carries text lines, with deadlines on every wait: the wire of the
// elastic rendezvous between kindling-run agents (rendezvous_server.h, elastic_agent.h).
// Hand-written on POSIX sockets because kindling-run links no LibTorch (c10d's TCPStore
// lives there) and no packaged library offers a rendezvous between launchers. Internal to
// src/supervisor/.
#include <chrono>
#include <optional>
#include <string>

namespace kindling {
namespace supervisor {

/// One end of a connection; owns the socket (closed by the destructor). Not thread-safe.
class LineSocket {
 public:
  LineSocket() = default;
  explicit LineSocket(int fd) : fd_(fd) {}
  ~LineSocket();
  LineSocket(LineSocket&& other) noexcept;
  LineSocket& operator=(LineSocket&& other) noexcept;
  LineSocket(const LineSocket&) = delete;
  LineSocket& operator=(const LineSocket&) = delete;

  /// Connects to host:port (every address the name resolves to, each given `limit`).
  /// Returns an unconnected socket (valid() false) with `error` set when none answers.
  /// `refused`, when given, is set to whether every address refused the connection (a closed
  /// port on a host that answers: nothing listens there any more).
  static LineSocket connect(const std::string& host, int port, std::chrono::milliseconds limit, std::string& error,
                            bool* refused = nullptr);

  bool valid() const { return fd_ >= 0; }
  int fd() const { return fd_; }

  /// Writes `line` and a newline. Returns false when the connection is gone.
  bool send(const std::string& line);

  /// The next line (without its newline), waiting until `deadline`. Unset on timeout, or at
  /// the end of the connection (then closed() is true).
  std::optional<std::string> receive(std::chrono::steady_clock::time_point deadline);

  /// Reads what has arrived without waiting; returns false at the end of the connection.
  /// Complete lines are then taken with next_line(). For poll() loops.
  bool read_available();
  /// A complete line read earlier, if any.
  std::optional<std::string> next_line();

  bool closed() const { return closed_; }
  /// The peer's numeric address ("10.0.0.2"); empty when unknown.
  std::string peer_address() const;

 private:
  int fd_ = -1;
  bool closed_ = false;
  std::string buffer_;
};

/// A socket listening on address:port (numeric or a host name of this host). Returns -1 and
/// sets errno when it cannot bind (EADDRNOTAVAIL: not an address of this host; EADDRINUSE).
int listen_on(const std::string& address, int port);

}  // namespace supervisor
}  // namespace kindling
