#pragma once
// The rendezvous round this worker entered in the same process under live recovery
// (kindling::dist::rejoin, src/dist/live_round.h): the runtime's own record of the place the
// launcher gave it, read by every rule of "who started me" (launch_env.cpp's
// current_environment) in place of the variables the launcher started the process with. A
// value, never written into the environment: other threads may read that meanwhile.
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/round.h"

namespace kindling {
namespace dist {
namespace detail {

/// Records `round` as this process's place from now on. Any thread; never throws.
void enter_round_record(const ::kindling::detail::Round& round);
/// The variables a worker of local rank `local` of `nproc` started in `round` would have had:
/// round_variables (common/round.h), ROLE_RANK, ROLE_WORLD_SIZE, TORCHELASTIC_RESTART_COUNT and
/// KINDLING_LIVE_ROUND. Never throws.
std::vector<std::pair<std::string, std::string>> entered_round_variables(const ::kindling::detail::Round& round,
                                                                        int local, int nproc);
/// The round entered last, nullopt when none was (the process is in the launcher's first
/// layout). Any thread; never throws.
std::optional<::kindling::detail::Round> entered_round();

}  // namespace detail
}  // namespace dist
}  // namespace kindling
