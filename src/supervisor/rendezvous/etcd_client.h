#pragma once
// The calls of etcd's v3 API that kindling-run's etcd rendezvous makes (etcd_rendezvous.h), over
// the JSON gateway every etcd 3.4+ member serves on its client port (/v3/kv/..., /v3/lease/...),
// by libcurl and nlohmann-json. Hand-written because neither Debian nor PyPI ships a C++ etcd v3
// client (etcd's own is Go; the C++ ones on GitHub need gRPC builds). A request goes to one
// member; when that member does not answer it goes to the next one of the list, so the client
// lives as long as a majority of the cluster does. One client per thread (a libcurl handle is
// not shared). Internal to src/supervisor/.
#include <chrono>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace kindling {
namespace supervisor {

/// No member of the cluster answered (`reached` false), or one refused the request.
class EtcdError : public std::runtime_error {
 public:
  EtcdError(const std::string& what, bool reached) : std::runtime_error(what), reached_(reached) {}
  /// False when no member answered at all: the cluster is down or cut off from this host.
  bool reached() const { return reached_; }

 private:
  bool reached_;
};

/// What one member answered to GET /version (EtcdClient::probe): an etcd member answers its
/// version as JSON ({"etcdserver":"3.4.23",...}) without asking its cluster.
struct EtcdProbe {
  /// Whether the TCP connection was made (false: nothing listens there, or no route).
  bool connected = false;
  /// The HTTP status; 0 when the answer was not HTTP (or there was none).
  long status = 0;
  /// The first bytes of what came back (HTTP/0.9 allowed: any program's first line).
  std::string reply;
  /// libcurl's reason when the request did not complete ("Timeout was reached"); else empty.
  std::string error;
  /// Connected, and nothing came back within the limit.
  bool silent() const { return connected && reply.empty() && !error.empty(); }
  /// Answered as an etcd member does.
  bool etcd() const;
};

/// A key's value and the revision that last changed it.
struct EtcdValue {
  std::string value;
  int64_t mod_revision = 0;
};

class EtcdClient {
 public:
  /// `endpoints`: "host:port" of the members (port 2379 when not given); `timeout`: the limit of
  /// one request on one member. Throws std::invalid_argument for an empty list.
  EtcdClient(std::vector<std::string> endpoints, std::chrono::milliseconds timeout);
  ~EtcdClient();
  EtcdClient(const EtcdClient&) = delete;
  EtcdClient& operator=(const EtcdClient&) = delete;

  /// The value of `key`, unset when there is none. Throws EtcdError.
  std::optional<EtcdValue> get(const std::string& key);
  /// Sets `key` (attached to `lease` when not 0: it goes when the lease expires). Throws EtcdError.
  void put(const std::string& key, const std::string& value, int64_t lease = 0);
  /// Sets `key` only when it does not exist; returns whether it did. Throws EtcdError.
  bool create(const std::string& key, const std::string& value, int64_t lease);
  /// Deletes `key` only while `mod_revision` is still its last change; returns whether it did.
  /// Throws EtcdError.
  bool remove_if_unchanged(const std::string& key, int64_t mod_revision);
  /// A new lease of `ttl_seconds`; returns its id. Throws EtcdError.
  int64_t grant(int ttl_seconds);
  /// Renews `lease`; false when it has already expired. Throws EtcdError.
  bool keep_alive(int64_t lease);
  /// Ends `lease` and every key attached to it. Throws EtcdError.
  void revoke(int64_t lease);
  /// GET /version on member `index` of endpoints(), waiting up to `limit`: what the program at
  /// that endpoint is (etcd_rendezvous.cpp tells etcd from other programs by it). Never throws.
  EtcdProbe probe(std::size_t index, std::chrono::milliseconds limit);
  /// This host's address on the connection of the last answered request ("10.0.0.2"): the one
  /// the cluster's hosts reach it by. Empty before the first answer.
  const std::string& local_address() const { return local_address_; }
  /// The members, as given.
  const std::vector<std::string>& endpoints() const { return endpoints_; }

 private:
  std::string call(const std::string& path, const std::string& body);
  std::vector<std::string> endpoints_;
  std::chrono::milliseconds timeout_;
  std::size_t current_ = 0;  // the member that answered last
  std::string local_address_;
  void* curl_;  // CURL*, kept out of this header
};

}  // namespace supervisor
}  // namespace kindling
