// Client connections to a TCPStore server (see store_client.h).
#include "dist/rendezvous/store_client.h"

#include "kindling/detail/torch_compat.h"

#if KINDLING_TORCH_STORE_CLIENT_HAS_WATCH_THREAD
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <torch/csrc/distributed/c10d/Utils.hpp>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

#include "dist/rendezvous/probe.h"
#endif

namespace kindling {
namespace dist {
namespace detail {

#if KINDLING_TORCH_STORE_CLIENT_HAS_WATCH_THREAD
namespace {

// Hand-written because no package offers it: a client of the TCPStore wire protocol of
// LibTorch before 2.2 (a command byte, then length-prefixed keys and values, as
// c10d::tcputil sends them) without the watch connection and thread that c10d's client of
// those releases opens (see store_client.h). The framing itself is c10d's own (tcputil).
enum class StoreCommand : uint8_t { kSet = 0, kCompareSet = 1, kGet = 2, kAdd = 3, kCheck = 4, kWait = 5, kNumKeys = 6, kDelete = 8 };
constexpr uint8_t kStoreReady = 0;        // answer to kCheck: every key is set
constexpr uint8_t kStoreStopWaiting = 0;  // answer to kWait: every key is set

class StoreClient : public c10d::Store {
 public:
  StoreClient(std::string host, const c10d::TCPStoreOptions& opts)
      : c10d::Store(opts.timeout), host_(std::move(host)), port_(opts.port) {
    std::lock_guard<std::mutex> lock(mu_);
    connect();
    if (opts.waitWorkers && opts.numWorkers) {
      // c10d's clients count themselves under the unprefixed key "init/".
      run("join", [&] { return add_raw("init/", 1); });
    }
  }

  ~StoreClient() override { close_socket(); }

  void set(const std::string& key, const std::vector<uint8_t>& value) override {
    std::lock_guard<std::mutex> lock(mu_);
    run("set", [&] {
      send_command(StoreCommand::kSet);
      c10d::tcputil::sendString(fd_, kPrefix + key, true);
      c10d::tcputil::sendVector<uint8_t>(fd_, value);
      return 0;
    });
  }

  std::vector<uint8_t> compareSet(const std::string& key, const std::vector<uint8_t>& expected,
                                  const std::vector<uint8_t>& desired) override {
    std::lock_guard<std::mutex> lock(mu_);
    return run("compareSet", [&] {
      send_command(StoreCommand::kCompareSet);
      c10d::tcputil::sendString(fd_, kPrefix + key, true);
      c10d::tcputil::sendVector<uint8_t>(fd_, expected, true);
      c10d::tcputil::sendVector<uint8_t>(fd_, desired);
      return c10d::tcputil::recvVector<uint8_t>(fd_);
    });
  }

  std::vector<uint8_t> get(const std::string& key) override {
    std::lock_guard<std::mutex> lock(mu_);
    wait_locked({kPrefix + key}, timeout_);
    return run("get", [&] {
      send_command(StoreCommand::kGet);
      c10d::tcputil::sendString(fd_, kPrefix + key);
      return c10d::tcputil::recvVector<uint8_t>(fd_);
    });
  }

  int64_t add(const std::string& key, int64_t value) override {
    std::lock_guard<std::mutex> lock(mu_);
    return run("add", [&] { return add_raw(kPrefix + key, value); });
  }

  bool deleteKey(const std::string& key) override {
    std::lock_guard<std::mutex> lock(mu_);
    return run("deleteKey", [&] {
      send_command(StoreCommand::kDelete);
      c10d::tcputil::sendString(fd_, kPrefix + key);
      return c10d::tcputil::recvValue<int64_t>(fd_) == 1;
    });
  }

  bool check(const std::vector<std::string>& keys) override {
    std::lock_guard<std::mutex> lock(mu_);
    return run("check", [&] {
      send_command(StoreCommand::kCheck);
      send_keys(prefixed(keys));
      return c10d::tcputil::recvValue<uint8_t>(fd_) == kStoreReady;
    });
  }

  int64_t getNumKeys() override {
    std::lock_guard<std::mutex> lock(mu_);
    return run("getNumKeys", [&] {
      send_command(StoreCommand::kNumKeys);
      return c10d::tcputil::recvValue<int64_t>(fd_);
    });
  }

  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }

  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    std::lock_guard<std::mutex> lock(mu_);
    wait_locked(prefixed(keys), timeout);
  }

  void watchKey(const std::string& key, c10d::WatchKeyCallback) override {
    TORCH_CHECK(false, "kindling's store client does not watch keys (asked to watch '", key, "')");
  }

 private:
  static constexpr const char* kPrefix = "/";  // c10d::TCPStore's prefix of every user key

  std::string where() const { return "the store at " + host_ + ":" + std::to_string(port_); }

  static std::vector<std::string> prefixed(const std::vector<std::string>& keys) {
    std::vector<std::string> out;
    out.reserve(keys.size());
    for (const auto& k : keys) out.push_back(kPrefix + k);
    return out;
  }

  // Connects, retrying a refused connection (the server may not listen yet) until the
  // store's timeout. Throws std::system_error.
  void connect() {
    const auto deadline = std::chrono::steady_clock::now() + timeout_;
    for (;;) {
      fd_ = connect_tcp(host_, port_, std::chrono::duration_cast<std::chrono::milliseconds>(timeout_));
      if (fd_ >= 0) break;
      const int error = errno;
      if (error != ECONNREFUSED || std::chrono::steady_clock::now() >= deadline) {
        throw std::system_error(error, std::system_category(), where() + ": connect");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    const int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  }

  void close_socket() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

  // Runs one request/answer exchange. A connection whose exchange failed is out of step
  // with the server: it stays closed, and this and every later call say why.
  template <typename F>
  auto run(const char* op, F&& exchange) -> decltype(exchange()) {
    if (fd_ < 0) {
      if (!broken_.empty()) throw std::system_error(ECONNRESET, std::system_category(), broken_);
      connect();  // replaces a connection closed after a wait that timed out
    }
    try {
      return exchange();
    } catch (const std::system_error& e) {
      close_socket();
      broken_ = where() + ": " + op + " failed earlier (" + e.what() + ")";
      throw std::system_error(e.code(), where() + ": " + op);
    }
  }

  void send_command(StoreCommand c) { c10d::tcputil::sendValue<uint8_t>(fd_, static_cast<uint8_t>(c), true); }

  void send_keys(const std::vector<std::string>& keys) {
    const c10d::SizeType n = keys.size();
    c10d::tcputil::sendBytes<c10d::SizeType>(fd_, &n, 1, !keys.empty());
    for (std::size_t i = 0; i < keys.size(); ++i) c10d::tcputil::sendString(fd_, keys[i], i + 1 < keys.size());
  }

  int64_t add_raw(const std::string& key, int64_t value) {
    send_command(StoreCommand::kAdd);
    c10d::tcputil::sendString(fd_, key, true);
    c10d::tcputil::sendValue<int64_t>(fd_, value);
    return c10d::tcputil::recvValue<int64_t>(fd_);
  }

  // Waits until every key (already prefixed) is set. After a timeout the server still
  // holds the wait for this connection, so the connection is closed (the server forgets
  // the wait) and the next call opens a new one.
  void wait_locked(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
    const bool answered = run("wait", [&] {
      send_command(StoreCommand::kWait);
      send_keys(keys);
      if (!readable_within(timeout)) return false;
      if (c10d::tcputil::recvValue<uint8_t>(fd_) != kStoreStopWaiting) {
        throw std::system_error(EPROTO, std::system_category(), "unexpected answer to wait");
      }
      return true;
    });
    if (answered) return;
    close_socket();
    std::string names;
    for (const auto& k : keys) names += (names.empty() ? "'" : ", '") + k.substr(1) + "'";
    TORCH_CHECK(false, "Socket Timeout: ", where(), " did not set ", names, " within ", timeout.count(), " ms");
  }

  // True when an answer can be read before `timeout` (a zero timeout waits for ever).
  bool readable_within(std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      int wait_ms = -1;
      if (timeout.count() > 0) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
        wait_ms = static_cast<int>(std::max<int64_t>(0, std::min<int64_t>(left.count(), 1 << 30)));
      }
      pollfd p{fd_, POLLIN, 0};
      const int rc = ::poll(&p, 1, wait_ms);
      if (rc > 0) return true;  // data, or an error the read then reports
      if (rc == 0) return false;
      if (errno != EINTR) throw std::system_error(errno, std::system_category(), "poll");
    }
  }

  std::mutex mu_;
  std::string host_;
  int port_;
  int fd_ = -1;
  std::string broken_;  // why the connection is unusable, once an exchange failed
};

}  // namespace
#endif

c10::intrusive_ptr<c10d::Store> open_store_client(const std::string& host, const c10d::TCPStoreOptions& opts) {
  TORCH_CHECK(!opts.isServer, "open_store_client opens clients only");
#if KINDLING_TORCH_STORE_CLIENT_HAS_WATCH_THREAD
  return c10::make_intrusive<StoreClient>(host, opts);
#else
  return c10::make_intrusive<c10d::TCPStore>(host, opts);
#endif
}

}  // namespace detail
}  // namespace dist
}  // namespace kindling
