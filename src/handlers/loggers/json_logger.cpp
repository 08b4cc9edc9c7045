// JsonLogger: BaseLogger's scalars as JSON lines, written without a JSON library (the
// project has none): the escaping and the number formatting are here.
#include "kindling/handlers/loggers/json_logger.h"

#include <fcntl.h>

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>

#include "common/files.h"
#include "handlers/loggers/tensorboard/event_file.h"
#include "handlers/loggers/json_text.h"
#include "kindling/error.h"

namespace kindling {
namespace handlers {
namespace {

const std::string kWho = "kindling::handlers::JsonLogger";

std::string fixed_text(double value, int decimals) {
  char buffer[64];
  const auto result = std::to_chars(buffer, buffer + sizeof(buffer), value, std::chars_format::fixed, decimals);
  return std::string(buffer, result.ptr);
}

// The JSON line of one scalar (with its newline).
std::string json_line(const std::string& tag, const std::string& name, double value, int64_t step, double wall_time) {
  std::string line = "{\"tag\":" + JsonLogger::quote(tag) + ",\"step\":" + std::to_string(step) +
                     ",\"name\":" + JsonLogger::quote(name) + ",\"value\":";
  if (std::isfinite(value)) {
    line += detail::shortest_number(value);
  } else {
    line += std::string("null,\"non_finite\":\"") + (std::isnan(value) ? "nan" : value > 0 ? "inf" : "-inf") + "\"";
  }
  line += ",\"wall_time\":" + fixed_text(wall_time, 6) + "}\n";
  return line;
}

// The JSON-lines file of rank 0.
class JsonLinesSink final : public detail::ScalarSink {
 public:
  JsonLinesSink(const std::string& path, bool append) {
    const std::string parent = ::kindling::detail::parent_directory(path);
    if (!parent.empty()) ::kindling::detail::make_directories(parent, kWho);
    const int error = file_.open(path, O_CREAT | O_APPEND | (append ? 0 : O_TRUNC));
    KINDLING_CHECK_T(Error, error == 0, kWho, ": cannot open ", path, " (", std::strerror(error),
                     "); check that its directory is writable and that it is not a directory");
  }

  void write(const std::string& tag, const std::string& name, double value, int64_t step) override {
    const std::string line = json_line(tag, name, value, step, detail::wall_time_now());
    std::lock_guard<std::mutex> lock(mutex_);
    if (!file_.is_open()) {  // dropped with a warning, not thrown (ClosedSinkWarning)
      closed_.dropped(kWho, tag.empty() ? name : tag + "/" + name);
      return;
    }
    file_.write(line, kWho);
  }

  void close() override {
    std::lock_guard<std::mutex> lock(mutex_);
    file_.close(kWho);
  }

 private:
  std::mutex mutex_;
  ::kindling::detail::OutputFile file_;
  detail::ClosedSinkWarning closed_;
};

}  // namespace

std::string JsonLogger::quote(const std::string& text) { return detail::json_quote(text); }

JsonLogger::JsonLogger(std::string path, bool append) : BaseLogger("JsonLogger"), path_(std::move(path)) {
  KINDLING_CHECK(!path_.empty(),
                 "kindling::handlers::JsonLogger: path is an empty string; give the file for the JSON lines, e.g. "
                 "\"runs/exp1/scalars.jsonl\"");
  if (detail::this_rank() != 0) return;  // inert
  set_sink(std::make_shared<JsonLinesSink>(path_, append));
}

void JsonLogger::add_scalar(const std::string& tag, const std::string& name, double value, int64_t step) {
  if (sink() != nullptr) sink()->write(tag, name, value, step);
}

}  // namespace handlers
}  // namespace kindling
