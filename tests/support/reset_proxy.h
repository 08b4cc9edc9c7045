#pragma once
// A TCP proxy for tests: forwards connections made to its own loopback port to another
// loopback port, and resets every connection (TCP RST, as a peer whose socket closed with
// unread data or that was killed mid-handshake) once a marker file exists.
#include <atomic>
#include <string>
#include <thread>

namespace kindling {
namespace testing {

class ResetProxy {
 public:
  /// Listens on a free port of 127.0.0.1 and forwards to 127.0.0.1:`target_port`. From the
  /// moment the file `reset_marker` exists, every open and every later connection is reset.
  /// Throws std::runtime_error when it cannot listen.
  ResetProxy(int target_port, std::string reset_marker);
  /// Stops forwarding and closes every connection.
  ~ResetProxy();
  ResetProxy(const ResetProxy&) = delete;
  ResetProxy& operator=(const ResetProxy&) = delete;

  /// The port that clients connect to.
  int port() const { return port_; }

 private:
  void serve();
  bool resetting() const;

  int target_port_;
  std::string marker_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace testing
}  // namespace kindling
