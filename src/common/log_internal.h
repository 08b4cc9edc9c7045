#pragma once
// Internal: what kindling's log (src/common/log.cpp) shares with other spdlog users inside
// the library (setup_logger): level conversions and the rank tag.
#include <spdlog/spdlog.h>

#include <string>

#include "kindling/log.h"

namespace kindling {
namespace detail {

spdlog::level::level_enum to_spdlog(LogLevel level);
LogLevel from_spdlog(spdlog::level::level_enum level);
/// "[rank r/w] " from process_identity() (common/identity.h: the distributed model, else the
/// launcher's variables), else "" (a plain single process, or inconsistent variables, or
/// `relayed` (the line goes to stdout/stderr) and kindling-run's relay already tags it with this
/// rank of this world: KINDLING_OUTPUT_RANK_PREFIXED="r/w", supervisor/spawn.cpp; a file's
/// line, relayed false, keeps its tag). Never throws.
std::string log_rank_tag(bool relayed = true);

}  // namespace detail
}  // namespace kindling
