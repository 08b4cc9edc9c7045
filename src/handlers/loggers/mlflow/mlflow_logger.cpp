// MLflowLogger: the checks every rank makes, and rank 0's sender (mlflow_sink.cpp).
#include "kindling/handlers/loggers/mlflow.h"

#include "handlers/loggers/mlflow/mlflow_client.h"
#include "handlers/loggers/mlflow/mlflow_sink.h"
#include "kindling/error.h"

namespace kindling {
namespace handlers {
namespace {

// Refuses, on every rank, what MLflow would refuse from log_params / set_tags.
void check_entries(const std::map<std::string, std::string>& entries, const char* what, std::size_t max_value) {
  for (const auto& [key, value] : entries) {
    const std::string problem = detail::mlflow_key_problem(key);
    KINDLING_CHECK(problem.empty(), "kindling::handlers::MLflowLogger::", what, ": key '", key,
                   "' would be refused by MLflow: ", problem, "; rename it");
    KINDLING_CHECK(value.size() <= max_value, "kindling::handlers::MLflowLogger::", what, ": the value of '", key,
                   "' has ", value.size(), " characters, MLflow keeps at most ", max_value,
                   "; shorten it or log it as an artifact (log_artifact)");
  }
}

}  // namespace

MLflowLogger::MLflowLogger(std::string tracking_uri, RunOptions options) : BaseLogger("MLflowLogger") {
  detail::MlflowServer server = detail::mlflow_server(tracking_uri);  // checked on every rank
  tracking_uri_ = server.base_url;
  check_entries(options.tags, "RunOptions::tags", 8000);
  if (detail::this_rank() != 0) return;  // inert
  mlflow_ = std::make_shared<detail::MlflowSink>(std::move(server), std::move(options));
  set_sink(mlflow_);
}

MLflowLogger::~MLflowLogger() = default;

void MLflowLogger::log_params(const std::map<std::string, std::string>& params) {
  check_entries(params, "log_params", 6000);
  if (mlflow_) mlflow_->params(params, false);
}

void MLflowLogger::set_tags(const std::map<std::string, std::string>& tags) {
  check_entries(tags, "set_tags", 8000);
  if (mlflow_) mlflow_->params(tags, true);
}

void MLflowLogger::log_metrics(const std::map<std::string, double>& metrics, int64_t step) {
  if (mlflow_) mlflow_->metrics(metrics, step);
}

void MLflowLogger::log_artifact(const std::string& local_path, const std::string& artifact_path) {
  if (mlflow_) mlflow_->artifact(local_path, artifact_path);
}

bool MLflowLogger::flush(double timeout_s) { return mlflow_ ? mlflow_->flush(timeout_s) : true; }

std::string MLflowLogger::run_id() const { return mlflow_ ? mlflow_->run_id() : ""; }

std::string MLflowLogger::experiment_id() const { return mlflow_ ? mlflow_->experiment_id() : ""; }

int64_t MLflowLogger::not_logged() const { return mlflow_ ? mlflow_->not_logged() : 0; }

}  // namespace handlers
}  // namespace kindling
