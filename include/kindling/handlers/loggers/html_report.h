#pragma once
/// \file
/// kindling::handlers::HtmlReport: a training run as one self-contained HTML page (no
/// network, no scripts to fetch): a chart per scalar name with a line per tag (training
/// loss per iteration, train and test accuracy per validation, learning rate, ...), and the
/// run's configuration. It is a logger like TensorboardLogger: attach the same output and
/// optimizer handlers, then render() when the page should show what was logged so far.
///
/// \code
///   kindling::handlers::HtmlReport report(run_folder + "/report.html", "resnet18 on cifar10, gloo x 2");
///   report.set_config({{"batch_size", "512"}, {"learning_rate", "0.4"}});
///   report.attach_output_handler(test_evaluator, Events::COMPLETED, "test", {"Accuracy", "Loss"}, {},
///                                kindling::handlers::global_step_from_engine(trainer));
///   trainer.on(Events::EPOCH_COMPLETED, [&](Engine&) { report.render("after epoch 3"); });
/// \endcode
///
/// The page also carries every logged value for programs, in
/// `<script type="application/json" id="kindling-report-data">`: {"title", "config": [[name,
/// value], ...], "records": [{"tag", "name", "step", "value"}, ...]} with values written as
/// the JSON-lines logger writes them (shortest round-trip form; null plus "non_finite" for
/// NaN and infinities), so the two can be compared exactly.
///
/// Ranks: as TensorboardLogger, construct and attach on every rank; only rank 0 keeps
/// values and writes the page. Writing replaces the file atomically (a reader never sees a
/// half page; a kill during render() leaves the previous page). Nothing here communicates.

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kindling/export.h"
#include "kindling/handlers/loggers/tensorboard.h"
#include "kindling/handlers/profilers/timeline.h"

namespace kindling {
namespace handlers {

class DiskSaver;

class KINDLING_API HtmlReport : public BaseLogger {
 public:
  /// `path` is the page's file (its folder is created on rank 0 when missing); `title` heads
  /// the page. Throws kindling::UsageError for an empty path or inconsistent launcher
  /// variables before initialize (every rank; the rank as for TensorboardLogger),
  /// kindling::Error when the folder cannot be made (rank 0).
  HtmlReport(std::string path, std::string title);
  ~HtmlReport() override;

  /// The (name, value) rows of the page's configuration table, in order. Local.
  void set_config(std::vector<std::pair<std::string, std::string>> config);
  /// Logs one value, as the attached handlers do. A no-op on ranks other than 0. After
  /// close() the value is dropped with one warning in kindling's log, not thrown
  /// (TensorboardLogger's rule, see its "Lifetimes"). Does not throw.
  void add_scalar(const std::string& tag, const std::string& name, double value, int64_t step);
  /// Writes the page with everything logged so far; `footer` (e.g. "after epoch 3") is shown
  /// under the title with the time. A no-op on ranks other than 0. Throws kindling::Error when
  /// the file cannot be written (the previous page is then left as it was).
  void render(const std::string& footer = "");

  /// The page's path, on every rank.
  const std::string& path() const { return path_; }
  /// From the render() after `timeline`'s range has ended, the page also pictures one step of
  /// every rank: the last iteration of the range that every rank recorded, each rank's engine
  /// (data wait, handlers), step parts and communication on one time axis. Local; does not throw.
  void show_timeline(std::shared_ptr<const Timeline> timeline);

 private:
  struct Records;
  std::string path_, title_, filename_;
  std::shared_ptr<DiskSaver> saver_;  // writes the page; null on other ranks
  std::vector<std::pair<std::string, std::string>> config_;
  std::shared_ptr<Records> records_;  // shared with the sink; null on other ranks
  std::shared_ptr<const Timeline> timeline_;  // show_timeline
};

}  // namespace handlers
}  // namespace kindling
