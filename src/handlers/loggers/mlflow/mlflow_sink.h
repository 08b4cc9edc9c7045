#pragma once
// Internal to MLflowLogger: rank 0's queue of values and artifacts, and the thread that sends
// them to the server in batches, retries while the server cannot be reached, and counts what it
// gives up (the rules are in kindling/handlers/loggers/mlflow.h).
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "handlers/loggers/tensorboard/event_file.h"
#include "handlers/loggers/mlflow/mlflow_client.h"
#include "kindling/handlers/loggers/mlflow.h"

namespace kindling {
namespace handlers {
namespace detail {

/// Why MLflow would refuse `key` as a metric, parameter or tag name ("" when it takes it):
/// characters other than ASCII letters, digits, '_', '-', '.', ' ', ':' and '/', more than 250
/// of them, empty, or a path that is not normal ("/a", "a//b", "a/./b", "a/").
std::string mlflow_key_problem(const std::string& key);

/// The ignite key of a handler's scalar: "<tag> <name>", each '/' read as a space.
std::string mlflow_metric_key(const std::string& tag, const std::string& name);

class MlflowSink final : public ScalarSink {
 public:
  /// Tries to create (or resume) the run once now, then starts the sender. Throws
  /// kindling::Error when the server refuses the run.
  MlflowSink(MlflowServer server, MLflowLogger::RunOptions options);
  ~MlflowSink() override;

  void write(const std::string& tag, const std::string& name, double value, int64_t step) override;
  /// Sends what waits (one more try when the server cannot be reached), marks the run FINISHED,
  /// warns about what was not logged, and stops the sender. A no-op the second time.
  void close() override;

  void metrics(const std::map<std::string, double>& values, int64_t step);
  void params(const std::map<std::string, std::string>& values, bool tags);
  void artifact(const std::string& local_path, const std::string& artifact_path);
  bool flush(double timeout_s);
  std::string run_id() const;
  std::string experiment_id() const;
  int64_t not_logged() const;

 private:
  struct Item {
    enum Kind { kMetric, kParam, kTag, kArtifact } kind;
    std::string key, text;  // text: a param's or tag's value; an artifact's local path
    double value = 0;
    int64_t step = 0, timestamp = 0;
  };

  void enqueue(Item item);
  void metric(const std::string& key, double value, int64_t step, int64_t timestamp);
  void sender();
  bool ensure_run();
  void create_run();
  void send(const std::vector<Item>& batch);
  std::vector<Item> next_batch();
  void give_up(const std::vector<Item>& batch, const std::string& cause, const std::string& kind);
  void finish_run();

  MlflowClient client_;  // used by the constructor, then by the sender thread only
  MLflowLogger::RunOptions options_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<Item> queue_;
  std::size_t in_flight_ = 0;
  bool closing_ = false, closed_ = false;
  std::string run_id_, experiment_id_, artifact_root_;
  int64_t dropped_values_ = 0, dropped_artifacts_ = 0;
  std::string first_cause_;
  std::set<std::string> warned_;  // kinds of refusal and keys already warned about
  ClosedSinkWarning after_close_;
  std::thread thread_;
};

}  // namespace detail
}  // namespace handlers
}  // namespace kindling
