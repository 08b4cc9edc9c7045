// MLflowLogger's sender: the queue that training threads fill, and the thread that empties it
// into the server (runs/log-batch, artifact uploads) with the retry and give-up rules of mlflow.h.
#include "handlers/loggers/mlflow/mlflow_sink.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <utility>

#include "common/env.h"
#include "kindling/error.h"
#include "kindling/log.h"

namespace kindling {
namespace handlers {
namespace detail {
namespace {

constexpr std::size_t kMaxQueued = 100000;
constexpr std::size_t kMaxBatch = 1000, kMaxBatchParams = 100, kMaxBatchTags = 100;  // MLflow's log-batch limits

using Clock = std::chrono::steady_clock;

nlohmann::json metric_value(double value) {
  if (std::isnan(value)) return "NaN";  // protobuf's JSON spelling, which the server reads back
  if (std::isinf(value)) return value > 0 ? "Infinity" : "-Infinity";
  return value;
}

// "mlflow-artifacts:/0/<run>/artifacts" (or with "//host:port") -> "0/<run>/artifacts";
// "" for a store the server does not proxy (s3://..., a local folder).
std::string proxied_artifact_root(const std::string& uri) {
  const std::string scheme = "mlflow-artifacts:";
  if (uri.rfind(scheme, 0) != 0) return "";
  std::string path = uri.substr(scheme.size());
  if (path.rfind("//", 0) == 0) {
    const auto slash = path.find('/', 2);
    path = slash == std::string::npos ? "" : path.substr(slash);
  }
  while (!path.empty() && path.front() == '/') path.erase(0, 1);
  return path;
}

std::string program_path() {
  char buffer[4096];
  const ssize_t size = readlink("/proc/self/exe", buffer, sizeof(buffer) - 1);
  return size > 0 ? std::string(buffer, static_cast<std::size_t>(size)) : "kindling";
}

}  // namespace

std::string mlflow_key_problem(const std::string& key) {
  if (key.empty()) return "it is empty";
  if (key.size() > 250) return "it has " + std::to_string(key.size()) + " characters, more than MLflow's 250";
  for (const char c : key) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    std::string("_-. :/").find(c) != std::string::npos;
    if (!ok)
      return std::string("it holds '") + c + "': MLflow takes ASCII letters, digits, '_', '-', '.', ' ', ':', '/'";
  }
  const std::string wrapped = "/" + key + "/";
  if (key.front() == '/' || key.back() == '/' || key.find("//") != std::string::npos ||
      wrapped.find("/./") != std::string::npos || wrapped.find("/../") != std::string::npos) {
    return "it is not a normal path (MLflow refuses a leading or trailing '/', '//', '.' and '..' parts)";
  }
  return "";
}

std::string mlflow_metric_key(const std::string& tag, const std::string& name) {
  std::string key = tag.empty() ? name : tag + " " + name;
  std::replace(key.begin(), key.end(), '/', ' ');
  return key;
}

MlflowSink::MlflowSink(MlflowServer server, MLflowLogger::RunOptions options)
    : client_(std::move(server)), options_(std::move(options)) {
  try {
    create_run();
  } catch (const MlflowCallError& e) {
    KINDLING_CHECK_T(Error, e.retryable(), e.what(),
                     "; check the run id, the experiment and the credentials (MLFLOW_TRACKING_TOKEN, "
                     "MLFLOW_TRACKING_USERNAME/PASSWORD)");
    warned_.insert("transport");
    kindling::log(LogLevel::kWarning, std::string(e.what()) +
                                          "; training goes on: values are queued, and the run is created once the "
                                          "server answers (told once)");
  }
  for (const auto& [key, value] : options_.tags) enqueue({Item::kTag, key, value});
  thread_ = std::thread([this] { sender(); });
}

MlflowSink::~MlflowSink() {
  try {
    close();
  } catch (const std::exception& e) {
    kindling::log(LogLevel::kError, std::string(kMlflowWho) + ": closing failed: " + e.what());
  }
}

void MlflowSink::create_run() {
  using ::kindling::detail::get_env;
  nlohmann::json run;
  auto resume = options_.run_id ? options_.run_id : get_env("MLFLOW_RUN_ID");
  if (resume && !resume->empty()) {
    run = client_.call("runs/get", {{"run_id", *resume}}, true).at("run");
    client_.call("runs/update", {{"run_id", *resume}, {"status", "RUNNING"}});
  } else {
    std::string experiment = get_env("MLFLOW_EXPERIMENT_ID").value_or("0");
    const auto name = options_.experiment_name ? options_.experiment_name : get_env("MLFLOW_EXPERIMENT_NAME");
    if (name && !name->empty()) {
      try {
        experiment = client_.call("experiments/get-by-name", {{"experiment_name", *name}}, true)
                         .at("experiment")
                         .at("experiment_id");
      } catch (const MlflowCallError& e) {
        if (e.kind() != "RESOURCE_DOES_NOT_EXIST") throw;
        experiment = client_.call("experiments/create", {{"name", *name}}).at("experiment_id");
      }
    }
    nlohmann::json tags = nlohmann::json::array({{{"key", "mlflow.source.name"}, {"value", program_path()}},
                                                 {{"key", "mlflow.source.type"}, {"value", "LOCAL"}}});
    const auto user = get_env("USER");
    if (user) tags.push_back({{"key", "mlflow.user"}, {"value", *user}});
    nlohmann::json body = {{"experiment_id", experiment}, {"start_time", mlflow_now_ms()}, {"tags", tags}};
    if (user) body["user_id"] = *user;
    if (options_.run_name) body["run_name"] = *options_.run_name;
    run = client_.call("runs/create", body).at("run");
  }
  const auto& info = run.at("info");
  std::lock_guard<std::mutex> lock(mutex_);
  run_id_ = info.at("run_id").get<std::string>();
  experiment_id_ = info.at("experiment_id").get<std::string>();
  artifact_root_ = proxied_artifact_root(info.value("artifact_uri", ""));
}

void MlflowSink::enqueue(Item item) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (closing_) {
    after_close_.dropped(kMlflowWho, item.key);
    return;
  }
  if (queue_.size() >= kMaxQueued) {
    ++(item.kind == Item::kArtifact ? dropped_artifacts_ : dropped_values_);
    if (warned_.insert("queue full").second) {
      kindling::log(LogLevel::kWarning, std::string(kMlflowWho) + ": " + std::to_string(kMaxQueued) +
                                            " values wait for the server already; later ones are dropped until it "
                                            "takes them (told once)");
    }
    return;
  }
  queue_.push_back(std::move(item));
  changed_.notify_all();
}

void MlflowSink::metric(const std::string& key, double value, int64_t step, int64_t timestamp) {
  const std::string problem = mlflow_key_problem(key);
  if (!problem.empty()) {
    std::lock_guard<std::mutex> lock(mutex_);
    ++dropped_values_;
    if (warned_.insert("key " + key).second) {
      kindling::log(LogLevel::kWarning, std::string(kMlflowWho) + ": metric '" + key + "' is not logged: " + problem +
                                            " (told once for this key)");
    }
    return;
  }
  enqueue({Item::kMetric, key, "", value, step, timestamp});
}

void MlflowSink::write(const std::string& tag, const std::string& name, double value, int64_t step) {
  metric(mlflow_metric_key(tag, name), value, step, mlflow_now_ms());
}

void MlflowSink::metrics(const std::map<std::string, double>& values, int64_t step) {
  const int64_t now = mlflow_now_ms();
  for (const auto& [key, value] : values) metric(key, value, step, now);
}

void MlflowSink::params(const std::map<std::string, std::string>& values, bool tags) {
  for (const auto& [key, value] : values) enqueue({tags ? Item::kTag : Item::kParam, key, value});
}

void MlflowSink::artifact(const std::string& local_path, const std::string& artifact_path) {
  enqueue({Item::kArtifact, artifact_path, local_path});
}

// The front of the queue, left there until sent: an artifact alone, else metrics, or else
// parameters and tags, up to MLflow's limits, stopping before the next item of another kind.
std::vector<MlflowSink::Item> MlflowSink::next_batch() {
  std::vector<Item> batch;
  std::size_t params = 0, tags = 0;
  for (const Item& item : queue_) {
    if (item.kind == Item::kArtifact) {
      if (batch.empty()) batch.push_back(item);
      break;
    }
    // Values and parameters go in separate batches: the server refuses a whole batch for one
    // parameter logged again with another value, which must not take metrics with it.
    const bool switches = !batch.empty() && (item.kind == Item::kMetric) != (batch.front().kind == Item::kMetric);
    if (switches || batch.size() == kMaxBatch || (item.kind == Item::kParam && params == kMaxBatchParams) ||
        (item.kind == Item::kTag && tags == kMaxBatchTags)) {
      break;
    }
    params += item.kind == Item::kParam;
    tags += item.kind == Item::kTag;
    batch.push_back(item);
  }
  return batch;
}

void MlflowSink::send(const std::vector<Item>& batch) {
  std::string run_id, artifact_root;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    run_id = run_id_;
    artifact_root = artifact_root_;
  }
  if (batch.front().kind == Item::kArtifact) {
    if (artifact_root.empty()) {
      throw MlflowCallError(std::string(kMlflowWho) +
                                ": the server keeps this run's artifacts where kindling cannot write "
                                "(not MLflow's artifact proxy); start it with --serve-artifacts (the default) and "
                                "--artifacts-destination",
                            true, "artifact store");
    }
    const std::string& local = batch.front().text;
    const std::string name =
        local.substr(local.find_last_of('/') == std::string::npos ? 0 : local.find_last_of('/') + 1);
    const std::string& under = batch.front().key;
    client_.upload(local, artifact_root + "/" + (under.empty() ? "" : under + "/") + name);
    return;
  }
  nlohmann::json metrics = nlohmann::json::array(), params = nlohmann::json::array(), tags = nlohmann::json::array();
  for (const Item& item : batch) {
    if (item.kind == Item::kMetric) {
      metrics.push_back(
          {{"key", item.key}, {"value", metric_value(item.value)}, {"timestamp", item.timestamp}, {"step", item.step}});
    } else {
      (item.kind == Item::kParam ? params : tags).push_back({{"key", item.key}, {"value", item.text}});
    }
  }
  client_.call("runs/log-batch", {{"run_id", run_id}, {"metrics", metrics}, {"params", params}, {"tags", tags}});
}

void MlflowSink::give_up(const std::vector<Item>& batch, const std::string& cause, const std::string& kind) {
  int64_t values = 0, artifacts = 0;
  for (const Item& item : batch) ++(item.kind == Item::kArtifact ? artifacts : values);
  dropped_values_ += values;
  dropped_artifacts_ += artifacts;
  if (first_cause_.empty()) first_cause_ = cause;
  if (kind.empty() || !warned_.insert("refused " + kind).second) return;  // "": close()'s summary tells
  kindling::log(LogLevel::kWarning, cause + " (not logged: " + std::to_string(values) + " values and " +
                                        std::to_string(artifacts) + " artifacts; training goes on; told once for " +
                                        kind + ")");
}

void MlflowSink::sender() {
  auto backoff = std::chrono::seconds(1);
  Clock::time_point retry_at{};
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    if (!closing_ && queue_.empty()) {
      changed_.wait(lock, [this] { return closing_ || !queue_.empty(); });
      continue;
    }
    if (!closing_ && Clock::now() < retry_at) {
      changed_.wait_until(lock, retry_at, [this] { return closing_; });
      continue;
    }
    if (queue_.empty()) return;  // closing, all sent
    const std::vector<Item> batch = next_batch();
    const bool has_run = !run_id_.empty();
    lock.unlock();
    std::string failure, kind;
    bool retry = false;
    try {
      if (!has_run) create_run();
      send(batch);
    } catch (const MlflowCallError& e) {
      failure = e.what();
      kind = e.kind();
      retry = e.retryable();
    } catch (const std::exception& e) {  // an answer without the expected fields
      failure = std::string(kMlflowWho) + ": unexpected answer from the server: " + e.what();
      kind = "answer";
    }
    lock.lock();
    if (retry && !closing_) {
      if (warned_.insert("transport").second) {
        kindling::log(LogLevel::kWarning, failure +
                                              "; training goes on, the values are kept and sent again once "
                                              "the server answers (told once)");
      }
      retry_at = Clock::now() + backoff;
      backoff = std::min(backoff * 2, std::chrono::seconds(30));
      continue;
    }
    backoff = std::chrono::seconds(1);
    const std::size_t done = retry ? queue_.size() : batch.size();  // closing: give up what is left
    if (!failure.empty()) give_up(std::vector<Item>(queue_.begin(), queue_.begin() + done), failure, retry ? "" : kind);
    queue_.erase(queue_.begin(), queue_.begin() + done);
    changed_.notify_all();
  }
}

void MlflowSink::finish_run() {
  std::string run_id;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    run_id = run_id_;
  }
  if (run_id.empty()) return;
  try {
    client_.call("runs/update", {{"run_id", run_id}, {"status", "FINISHED"}, {"end_time", mlflow_now_ms()}});
  } catch (const std::exception& e) {
    kindling::log(LogLevel::kWarning, std::string(e.what()) + "; the run stays RUNNING on the server");
  }
}

void MlflowSink::close() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (closing_) return;
    closing_ = true;
    changed_.notify_all();
  }
  if (thread_.joinable()) thread_.join();
  finish_run();
  std::lock_guard<std::mutex> lock(mutex_);
  if (dropped_values_ + dropped_artifacts_ > 0) {
    kindling::log(LogLevel::kWarning,
                  std::string(kMlflowWho) + ": " + std::to_string(dropped_values_) + " values and " +
                      std::to_string(dropped_artifacts_) + " artifacts were not logged to MLflow (" +
                      (run_id_.empty() ? "no run was created at " + client_.server().base_url : "run " + run_id_) +
                      "); first cause: " + (first_cause_.empty() ? "see the warnings above" : first_cause_));
  }
}

bool MlflowSink::flush(double timeout_s) {
  std::unique_lock<std::mutex> lock(mutex_);
  return changed_.wait_for(lock, std::chrono::duration<double>(timeout_s), [this] { return queue_.empty(); });
}

std::string MlflowSink::run_id() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return run_id_;
}

std::string MlflowSink::experiment_id() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return experiment_id_;
}

int64_t MlflowSink::not_logged() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return dropped_values_ + dropped_artifacts_;
}

}  // namespace detail
}  // namespace handlers
}  // namespace kindling
