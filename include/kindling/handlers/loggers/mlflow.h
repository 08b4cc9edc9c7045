#pragma once
/// \file
/// kindling::handlers::MLflowLogger: ignite's MLflowLogger, speaking MLflow's REST API (2.0) to
/// a tracking server (`mlflow server`, MLflow 2.x and 3.x) without Python: parameters, tags,
/// metrics per step (every BaseLogger handler: attach_output_handler, attach_opt_params_handler,
/// ...) and artifacts (files such as report.html or the best checkpoint).
///
/// \code
///   kindling::handlers::MLflowLogger mlflow("http://127.0.0.1:5000");   // or MLFLOW_TRACKING_URI
///   mlflow.log_params({{"lr", "0.1"}, {"batch_size", "64"}});
///   mlflow.attach_output_handler(trainer, Events::ITERATION_COMPLETED.every(100), "training", {},
///                                [](const Value& out) { return std::map<std::string, double>{{"loss", out.number()}};
///                                });
///   mlflow.attach_output_handler(evaluator, Events::COMPLETED, "validation", {"accuracy"}, {},
///                                kindling::handlers::global_step_from_engine(trainer));
///   trainer.run(loader, 10);
///   mlflow.log_artifact(checkpoint.last_checkpoint());   // uploaded under the run's artifacts
///   mlflow.close();                                       // sends what is queued; the run FINISHED
/// \endcode
///
/// Metric keys are ignite's: the tag, then the name with each '/' of kindling's naming read as
/// a space ("training loss", "validation accuracy 0" for a tensor's element 0, "lr group_0",
/// "generator lr group_0"), so an ignite run and its port log the same keys. A key MLflow
/// refuses (characters other than letters, digits, '_', '-', '.', ' ', ':' and '/', or more than
/// 250 of them) is not logged, with one warning per key (ignite warns and drops too).
///
/// Training never waits on the server and never stops for it: values are queued and sent by a
/// thread of the logger in batches (MLflow's log-batch, at most 1,000 values a request). When
/// the server cannot be reached, or answers 5xx, the batch is kept and sent again later (after
/// 1, 2, 4 ... 30 s), with one warning; when it refuses a batch (4xx, e.g. a parameter logged
/// again with another value) that batch is dropped, with the server's message, once per kind
/// of refusal. At most 100,000 values wait; later ones are dropped. close() sends what waits
/// (giving up at once on a server that cannot be reached) and marks the run FINISHED; whatever
/// was not logged is then counted in one warning ("120 metric values, 1 artifact were not
/// logged ... first cause ...") and by not_logged().
///
/// The run: MLFLOW_RUN_ID (or RunOptions::run_id) resumes that run, as mlflow.start_run() does;
/// otherwise a new run in the experiment named by RunOptions::experiment_name, else
/// MLFLOW_EXPERIMENT_NAME (created when missing), else MLFLOW_EXPERIMENT_ID, else MLflow's
/// default experiment ("0"). Credentials as MLflow's client reads them: MLFLOW_TRACKING_TOKEN
/// (a bearer token), else MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD (basic);
/// MLFLOW_TRACKING_INSECURE_TLS=true skips TLS verification. Proxies: libcurl's variables
/// (http_proxy, https_proxy, no_proxy).
///
/// Ranks: as every BaseLogger (tensorboard.h), only rank 0 talks to the server; elsewhere the
/// logger is inert and its methods return at once. Nothing here communicates between ranks.

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "kindling/export.h"
#include "kindling/handlers/loggers/tensorboard.h"

namespace kindling {
namespace handlers {
namespace detail {
class MlflowSink;
}  // namespace detail

class KINDLING_API MLflowLogger : public BaseLogger {
 public:
  /// Which run the logger writes to (each field unset: the environment's variable, see above).
  struct RunOptions {
    std::optional<std::string> experiment_name;
    std::optional<std::string> run_id;        ///< resume this run instead of creating one
    std::optional<std::string> run_name;      ///< a new run's name (MLflow picks one when unset)
    std::map<std::string, std::string> tags;  ///< set on the run at the start
  };

  /// On rank 0: creates (or resumes) the run at `tracking_uri` ("http://host:port" or
  /// "https://..."; "" reads MLFLOW_TRACKING_URI) and starts the sender thread; elsewhere
  /// nothing. A server that cannot be reached now does not throw: the run is created once it
  /// answers, with the values queued meanwhile (one warning). Throws kindling::UsageError, on
  /// every rank, when no URI is given nor set, when it is not http(s) (MLflow's local "mlruns"
  /// folders, databricks and sqlite URIs are Python-client stores: start `mlflow server` and
  /// give its URL), for inconsistent launcher variables before initialize (tensorboard.h);
  /// kindling::Error (rank 0) when the server refuses the run (4xx: e.g. an unknown run_id).
  explicit MLflowLogger(std::string tracking_uri = "", RunOptions options = {});
  ~MLflowLogger() override;

  /// Logs the run's parameters (MLflow keeps the first value of a key; another value later is
  /// refused by the server, warned and not logged). Throws kindling::UsageError, on every rank,
  /// for a key MLflow refuses (see above) or a value of more than 6,000 characters.
  void log_params(const std::map<std::string, std::string>& params);
  /// Sets tags on the run (a later value replaces the earlier one). Throws as log_params.
  void set_tags(const std::map<std::string, std::string>& tags);
  /// Logs each metric at `step` with the current time (keys used as given, not re-spelled; one
  /// MLflow refuses is not logged, with one warning per key). A no-op on ranks other than 0.
  void log_metrics(const std::map<std::string, double>& metrics, int64_t step);
  /// Uploads the file `local_path` as an artifact of the run, under `artifact_path`
  /// ("" for the top; e.g. "checkpoints"), named as the file. Sent by the sender thread in
  /// order: the file is read when its turn comes, so keep it until flush() or close() returns.
  /// A missing file, a failed upload, or a server whose artifact store kindling cannot write
  /// (anything but MLflow's artifact proxy, the default of `mlflow server`) is warned and
  /// counted, not thrown. A no-op on ranks other than 0.
  void log_artifact(const std::string& local_path, const std::string& artifact_path = "");
  /// Waits until everything logged so far was sent (or given up), at most `timeout_s` seconds.
  /// Returns whether nothing is left waiting. Does not throw. true at once on other ranks.
  bool flush(double timeout_s = 60.0);

  /// The run's id on rank 0 once created ("" before, and on other ranks).
  std::string run_id() const;
  /// The experiment's id on rank 0 once the run exists ("" before, and on other ranks).
  std::string experiment_id() const;
  /// The server's URL as used (on every rank).
  const std::string& tracking_uri() const { return tracking_uri_; }
  /// How many values (metrics, params and tags) and artifacts were not logged so far, on rank 0.
  int64_t not_logged() const;

 private:
  std::string tracking_uri_;
  std::shared_ptr<detail::MlflowSink> mlflow_;  // rank 0's sender (null elsewhere)
};

}  // namespace handlers
}  // namespace kindling
