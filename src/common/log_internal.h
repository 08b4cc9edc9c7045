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
/// "[rank r/w] " from the distributed model, else from RANK / WORLD_SIZE, else "".
std::string log_rank_tag();

}  // namespace detail
}  // namespace kindling
