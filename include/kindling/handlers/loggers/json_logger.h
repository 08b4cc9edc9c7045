#pragma once
/// \file
/// kindling::handlers::JsonLogger: the scalars of TensorboardLogger's handlers as JSON lines,
/// for scripts and plots that do not read TensorBoard files. One object per line:
///
///   {"tag":"training","step":100,"name":"loss","value":0.2513,"wall_time":1718000000.123456}
///   {"tag":"validation","step":2,"name":"per_class/0","value":null,"non_finite":"nan","wall_time":...}
///
/// - "tag": the handler's tag ("" when it has none: attach_opt_params_handler without a tag);
///   "name": the metric or output name, "<name>/<i>" for tensor elements, "<param>/group_<i>"
///   for optimizer parameters (TensorBoard's tag is "<tag>/<name>").
/// - "value": the number as float64, in the shortest form that reads back to the same double.
///   JSON has no NaN or infinity: such a value is written as null with "non_finite" set to
///   "nan", "inf" or "-inf"; finite values have no "non_finite" field.
/// - "step": an integer; "wall_time": seconds since the Unix epoch, 6 decimals.
/// - Strings are escaped by RFC 8259 (\" \\ \n \r \t \b \f, other control characters as
///   \u00XX); bytes that are not well-formed UTF-8 are replaced with U+FFFD, so every line
///   is valid JSON.
///
/// \code
///   kindling::handlers::JsonLogger json("runs/exp1/scalars.jsonl");
///   json.attach_output_handler(evaluator, Events::COMPLETED, "validation", {"accuracy"}, {},
///                              kindling::handlers::global_step_from_engine(trainer));
/// \endcode
///
/// Writing: each line is written with one write(2) to a file opened O_APPEND, so it is in the
/// kernel as soon as it is logged (line-buffered and flushed) and lines are never split;
/// close() fsyncs. Ranks: as TensorboardLogger, only rank 0 creates and writes the file;
/// elsewhere the logger is inert. Nothing here communicates.

#include <cstdint>
#include <string>

#include "kindling/export.h"
#include "kindling/handlers/loggers/tensorboard.h"

namespace kindling {
namespace handlers {

class KINDLING_API JsonLogger : public BaseLogger {
 public:
  /// On rank 0: creates the missing parent directories of `path` and opens it, emptied
  /// (append false) or keeping its lines (append true, e.g. for a resumed run); elsewhere
  /// nothing (the rank as for TensorboardLogger: kindling::dist::get_rank() once initialized,
  /// else the launcher's variables, else 0). Throws kindling::UsageError for an empty `path`
  /// or inconsistent launcher variables before initialize (every rank), kindling::Error when
  /// the directory or file cannot be made (rank 0).
  explicit JsonLogger(std::string path, bool append = false);

  /// Writes one line {"tag", "step", "name", "value", "wall_time"}. A no-op on ranks other
  /// than 0. After close() the line is dropped with one warning in kindling's log, not thrown
  /// (TensorboardLogger's rule, see its "Lifetimes"). Throws kindling::Error when the write fails.
  void add_scalar(const std::string& tag, const std::string& name, double value, int64_t step);

  /// The file's path (as given), on every rank.
  const std::string& path() const { return path_; }

  /// The JSON text of `text`: quoted and escaped as described above. Does not throw.
  static std::string quote(const std::string& text);

 private:
  std::string path_;
};

}  // namespace handlers
}  // namespace kindling
