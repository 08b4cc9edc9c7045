// Rank 0's TensorBoard event file: a new file per logger, one record per write.
#include "handlers/loggers/tensorboard/event_file_sink.h"

#include <fcntl.h>

#include <cerrno>
#include <cstring>

#include "kindling/dist/dist.h"
#include "kindling/error.h"
#include "kindling/log.h"

namespace kindling {
namespace handlers {
namespace detail {

namespace {
const std::string kSinkWho = "kindling::handlers::TensorboardLogger";
}  // namespace

EventFileSink::EventFileSink(const std::string& log_dir) {
  ::kindling::detail::make_directories(log_dir, kSinkWho);
  const double now = wall_time_now();
  const std::string base = ::kindling::detail::join_path(
      log_dir, "events.out.tfevents." + std::to_string(static_cast<int64_t>(now)) + "." + dist::hostname());
  int error = EEXIST;
  for (int n = 0; n < 1000 && error == EEXIST; ++n) {
    error = file_.open(n == 0 ? base : base + "." + std::to_string(n), O_CREAT | O_EXCL);
  }
  KINDLING_CHECK_T(Error, error == 0, kSinkWho, ": cannot create the event file ", base, " (", std::strerror(error),
                   "); check that ", log_dir, " is a writable directory");
  file_.write(tfrecord(file_version_event(now)), kSinkWho);
}

void EventFileSink::write(const std::string& tag, const std::string& name, double value, int64_t step) {
  const std::string full = tag.empty() ? name : tag + "/" + name;
  write_record(full, scalar_event(wall_time_now(), step, full, static_cast<float>(value)));
}

void EventFileSink::write_histogram(const std::string& tag, const HistogramSummary& histogram, int64_t step) {
  write_record(tag, histogram_event(wall_time_now(), step, tag, histogram));
}

void EventFileSink::write_record(const std::string& tag, const std::string& event) {
  if (!is_utf8(tag)) {  // a name known only at the event, on rank 0 (see the header)
    if (first_time("not UTF-8 " + tag)) {
      kindling::log(LogLevel::kWarning, kSinkWho + ": the tag '" + tag +
                                            "' is not valid UTF-8 (TensorBoard reads tags as UTF-8 strings), so its "
                                            "values are not logged; give the metric or output a UTF-8 name");
    }
    return;
  }
  const std::string record = tfrecord(event);
  std::lock_guard<std::mutex> lock(mutex_);
  if (!file_.is_open()) {  // a warning, not a throw: only rank 0 has a file (event_file.h)
    closed_.dropped(kSinkWho, tag);
    return;
  }
  file_.write(record, kSinkWho);
}

bool EventFileSink::first_time(const std::string& key) {
  std::lock_guard<std::mutex> lock(mutex_);
  return seen_.insert(key).second;
}

void EventFileSink::close() {
  std::lock_guard<std::mutex> lock(mutex_);
  file_.close(kSinkWho);
}

}  // namespace detail
}  // namespace handlers
}  // namespace kindling
