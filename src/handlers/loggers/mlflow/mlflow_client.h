#pragma once
// Internal to MLflowLogger: the calls of MLflow's REST API (2.0) it makes, over libcurl (the
// HTTP client Debian ships; TLS, proxies and authentication come with it), with JSON bodies by
// nlohmann-json. One client per thread: a libcurl easy handle is not shared between threads.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <stdexcept>
#include <string>

namespace kindling {
namespace handlers {
namespace detail {

/// How messages name the logger.
inline constexpr char kMlflowWho[] = "kindling::handlers::MLflowLogger";

/// Where the server is and how to authenticate (MLflow's environment variables, see mlflow.h).
struct MlflowServer {
  std::string base_url;  // "http://host:port" (no trailing '/')
  std::string token, username, password;
  bool insecure_tls = false;
};

/// The server of `tracking_uri` ("" reads MLFLOW_TRACKING_URI) and the credentials of the
/// environment. Throws kindling::UsageError for a missing or non-http(s) URI (every rank).
MlflowServer mlflow_server(const std::string& tracking_uri);

/// A call that failed. `reached` is false when no HTTP answer came (refused, timed out) or the
/// server answered 5xx: worth trying again later; true when the server refused the request.
class MlflowCallError : public std::runtime_error {
 public:
  MlflowCallError(const std::string& what, bool reached, std::string kind)
      : std::runtime_error(what), reached_(reached), kind_(std::move(kind)) {}
  bool retryable() const { return !reached_; }
  /// MLflow's error_code ("INVALID_PARAMETER_VALUE"), or "HTTP <status>" / "transport".
  const std::string& kind() const { return kind_; }

 private:
  bool reached_;
  std::string kind_;
};

class MlflowClient {
 public:
  explicit MlflowClient(MlflowServer server);
  ~MlflowClient();
  MlflowClient(const MlflowClient&) = delete;
  MlflowClient& operator=(const MlflowClient&) = delete;

  /// POST `body` to /api/2.0/mlflow/<endpoint> (GET with `body`'s fields as the query when
  /// `get`); returns the answer's JSON. Throws MlflowCallError.
  nlohmann::json call(const std::string& endpoint, const nlohmann::json& body, bool get = false);
  /// PUT the file `local_path` at /api/2.0/mlflow-artifacts/artifacts/<artifact_path> (MLflow's
  /// artifact proxy). Throws MlflowCallError (not retryable for a file that cannot be read).
  void upload(const std::string& local_path, const std::string& artifact_path);
  const MlflowServer& server() const { return server_; }

 private:
  std::string request(const std::string& method, const std::string& url, const std::string& body,
                      const std::string& file);
  MlflowServer server_;
  void* curl_;  // CURL*, kept out of this header
};

/// Milliseconds since the Unix epoch (MLflow's timestamps).
int64_t mlflow_now_ms();

}  // namespace detail
}  // namespace handlers
}  // namespace kindling
