// MLflowLogger's REST calls over libcurl: requests, answers, and the errors told apart as
// "try again later" (no answer, 5xx) or "refused" (4xx, with MLflow's error_code and message).
#include "handlers/loggers/mlflow/mlflow_client.h"

#include <curl/curl.h>
#include <sys/stat.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>

#include "common/env.h"
#include "kindling/error.h"

namespace kindling {
namespace handlers {
namespace detail {
namespace {

std::size_t append_reply(char* data, std::size_t size, std::size_t count, void* reply) {
  static_cast<std::string*>(reply)->append(data, size * count);
  return size * count;
}

CURL* handle(void* curl) { return static_cast<CURL*>(curl); }

// Each '/'-separated segment of `path` percent-encoded (a file name may hold spaces, '#', ...).
std::string escape_path(CURL* curl, const std::string& path) {
  std::string out;
  std::size_t start = 0;
  while (start <= path.size()) {
    std::size_t end = path.find('/', start);
    if (end == std::string::npos) end = path.size();
    std::unique_ptr<char, decltype(&curl_free)> part(
        curl_easy_escape(curl, path.data() + start, static_cast<int>(end - start)), &curl_free);
    if (!out.empty() || start > 0) out += '/';
    out += part ? part.get() : "";
    start = end + 1;
  }
  return out;
}

// The error of an answer with status >= 400: MLflow's {"error_code", "message"} when the body
// is that JSON, else the status and the start of the body.
MlflowCallError answer_error(long status, const std::string& url, const std::string& reply) {
  std::string code = "HTTP " + std::to_string(status);
  std::string message = reply.substr(0, 300);
  const auto json = nlohmann::json::parse(reply, nullptr, false);
  if (json.is_object() && json.contains("error_code")) {
    code = json.value("error_code", code);
    message = json.value("message", message);
  }
  return MlflowCallError(
      std::string(kMlflowWho) + ": " + url + " answered " + std::to_string(status) + " " + code + ": " + message,
      status < 500, code);
}

}  // namespace

MlflowServer mlflow_server(const std::string& tracking_uri) {
  MlflowServer server;
  std::string uri = tracking_uri;
  if (uri.empty()) uri = ::kindling::detail::get_env("MLFLOW_TRACKING_URI").value_or("");
  KINDLING_CHECK(!uri.empty(), kMlflowWho,
                 ": no tracking URI: give the server's URL (\"http://host:5000\") or set MLFLOW_TRACKING_URI; "
                 "start a server with `mlflow server --host 127.0.0.1 --port 5000`");
  KINDLING_CHECK(uri.rfind("http://", 0) == 0 || uri.rfind("https://", 0) == 0, kMlflowWho, ": tracking URI '", uri,
                 "' is not http:// or https://; kindling talks to an MLflow tracking server over its REST API, and "
                 "local folders (mlruns, file:), sqlite and databricks URIs are stores of MLflow's Python client: "
                 "run `mlflow server --backend-store-uri <that store>` and give its URL");
  while (!uri.empty() && uri.back() == '/') uri.pop_back();
  server.base_url = uri;
  server.token = ::kindling::detail::get_env("MLFLOW_TRACKING_TOKEN").value_or("");
  server.username = ::kindling::detail::get_env("MLFLOW_TRACKING_USERNAME").value_or("");
  server.password = ::kindling::detail::get_env("MLFLOW_TRACKING_PASSWORD").value_or("");
  const std::string insecure = ::kindling::detail::get_env("MLFLOW_TRACKING_INSECURE_TLS").value_or("");
  server.insecure_tls = insecure == "true" || insecure == "True" || insecure == "1";
  return server;
}

MlflowClient::MlflowClient(MlflowServer server) : server_(std::move(server)) {
  static std::once_flag once;  // curl_global_init is not thread-safe: once per process
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
  curl_ = curl_easy_init();
  KINDLING_CHECK_T(Error, curl_ != nullptr, kMlflowWho, ": libcurl could not make a handle (out of memory?)");
}

MlflowClient::~MlflowClient() { curl_easy_cleanup(handle(curl_)); }

std::string MlflowClient::request(const std::string& method, const std::string& url, const std::string& body,
                                  const std::string& file) {
  CURL* curl = handle(curl_);
  curl_easy_reset(curl);
  std::string reply;
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);  // no SIGALRM for timeouts: the process is threaded
  curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS, 3000L);
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, append_reply);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &reply);
  if (server_.insecure_tls) {
    curl_easy_setopt(curl, CURLOPT_SSL_VERIFYPEER, 0L);
    curl_easy_setopt(curl, CURLOPT_SSL_VERIFYHOST, 0L);
  }
  struct curl_slist* headers = curl_slist_append(nullptr, "Content-Type: application/json");
  if (!server_.token.empty()) {
    headers = curl_slist_append(headers, ("Authorization: Bearer " + server_.token).c_str());
  } else if (!server_.username.empty()) {
    curl_easy_setopt(curl, CURLOPT_HTTPAUTH, static_cast<long>(CURLAUTH_BASIC));
    curl_easy_setopt(curl, CURLOPT_USERNAME, server_.username.c_str());
    curl_easy_setopt(curl, CURLOPT_PASSWORD, server_.password.c_str());
  }
  std::unique_ptr<curl_slist, decltype(&curl_slist_free_all)> header_list(headers, &curl_slist_free_all);
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
  std::unique_ptr<FILE, decltype(&std::fclose)> in(nullptr, &std::fclose);
  if (method == "PUT") {
    in.reset(std::fopen(file.c_str(), "rb"));
    struct stat info {};
    if (!in || fstat(fileno(in.get()), &info) != 0) {
      throw MlflowCallError(std::string(kMlflowWho) + ": cannot read the artifact " + file + " (" +
                                std::strerror(errno) + "); keep the file until flush() or close() returns",
                            true, "file");
    }
    curl_easy_setopt(curl, CURLOPT_UPLOAD, 1L);
    curl_easy_setopt(curl, CURLOPT_READDATA, in.get());
    curl_easy_setopt(curl, CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(info.st_size));
    curl_easy_setopt(curl, CURLOPT_LOW_SPEED_LIMIT, 1024L);  // an upload stalled 30 s is given up
    curl_easy_setopt(curl, CURLOPT_LOW_SPEED_TIME, 30L);
  } else {
    curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, 30000L);
    if (method == "POST") {
      curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body.c_str());
      curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body.size()));
    }
  }
  const CURLcode result = curl_easy_perform(curl);
  if (result != CURLE_OK) {
    throw MlflowCallError(std::string(kMlflowWho) + ": no answer from " + url + ": " + curl_easy_strerror(result),
                          false, "transport");
  }
  long status = 0;
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
  if (status >= 400) throw answer_error(status, url, reply);
  return reply;
}

nlohmann::json MlflowClient::call(const std::string& endpoint, const nlohmann::json& body, bool get) {
  std::string url = server_.base_url + "/api/2.0/mlflow/" + endpoint;
  std::string reply;
  if (get) {
    char separator = '?';
    for (const auto& [key, value] : body.items()) {
      std::unique_ptr<char, decltype(&curl_free)> text(
          curl_easy_escape(handle(curl_), value.get<std::string>().c_str(), 0), &curl_free);
      url += separator + key + "=" + (text ? text.get() : "");
      separator = '&';
    }
    reply = request("GET", url, "", "");
  } else {
    reply = request("POST", url, body.dump(), "");
  }
  auto json = nlohmann::json::parse(reply, nullptr, false);
  if (json.is_discarded()) {
    throw MlflowCallError(std::string(kMlflowWho) + ": " + url + " answered something that is not JSON: " +
                              reply.substr(0, 200) + "; is this an MLflow tracking server?",
                          true, "not JSON");
  }
  return json;
}

void MlflowClient::upload(const std::string& local_path, const std::string& artifact_path) {
  const std::string url =
      server_.base_url + "/api/2.0/mlflow-artifacts/artifacts/" + escape_path(handle(curl_), artifact_path);
  request("PUT", url, "", local_path);
}

int64_t mlflow_now_ms() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
}

}  // namespace detail
}  // namespace handlers
}  // namespace kindling
