#pragma once
// Internal: rank 0's TensorBoard event file, written record by record (scalars for every
// logger handler, histograms for TensorboardLogger's parameter handlers). Thread-safe.
#include <cstdint>
#include <mutex>
#include <set>
#include <string>

#include "common/files.h"
#include "handlers/loggers/tensorboard/event_file.h"
#include "kindling/handlers/loggers/tensorboard.h"

namespace kindling {
namespace handlers {
namespace detail {

class EventFileSink final : public ScalarSink {
 public:
  /// Creates `log_dir` (and parents) and a new event file in it, named as TensorboardLogger
  /// says, and writes the file-version record. Throws kindling::Error when either fails.
  explicit EventFileSink(const std::string& log_dir);
  /// One scalar record "<tag>/<name>" (or "<name>" for an empty tag). After close() the
  /// record is dropped (ClosedSinkWarning); a tag that is not UTF-8 is dropped with one
  /// warning per tag (a throw here would stop rank 0 only: the public entry points check
  /// their tags on every rank first). Throws kindling::Error when the write fails.
  void write(const std::string& tag, const std::string& name, double value, int64_t step) override;
  /// One histogram record under `tag`; throws as write().
  void write_histogram(const std::string& tag, const HistogramSummary& histogram, int64_t step);
  /// Whether this is the first call for `key` on this file (for warnings given once).
  bool first_time(const std::string& key);
  void close() override;
  const std::string& path() const { return file_.path(); }

 private:
  void write_record(const std::string& tag, const std::string& event);
  std::mutex mutex_;
  ::kindling::detail::OutputFile file_;
  std::set<std::string> seen_;
  ClosedSinkWarning closed_;
};

}  // namespace detail
}  // namespace handlers
}  // namespace kindling
