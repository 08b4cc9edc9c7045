// The round this worker entered under live recovery (see entered_round.h).
#include "launch/entered_round.h"

#include <mutex>

namespace kindling {
namespace dist {
namespace detail {

namespace {
std::mutex& record_lock() {
  static auto* lock = new std::mutex();  // never destroyed: threads may ask while the process exits
  return *lock;
}
std::optional<::kindling::detail::Round>& record() {
  static auto* entered = new std::optional<::kindling::detail::Round>();
  return *entered;
}
}  // namespace

void enter_round_record(const ::kindling::detail::Round& round) {
  std::lock_guard<std::mutex> lock(record_lock());
  record() = round;
}

std::vector<std::pair<std::string, std::string>> entered_round_variables(const ::kindling::detail::Round& round,
                                                                        int local, int nproc) {
  auto variables = ::kindling::detail::round_variables(round, local, nproc);
  variables.emplace_back("ROLE_RANK", std::to_string(round.rank_offset + local));
  variables.emplace_back("ROLE_WORLD_SIZE", std::to_string(round.world_size));
  variables.emplace_back("TORCHELASTIC_RESTART_COUNT", std::to_string(round.restarts));
  variables.emplace_back(::kindling::detail::kLiveRoundVariable, std::to_string(round.round));
  // A worker started before its node joined (--warm_join) was given no instance.
  if (!round.instance.empty()) variables.emplace_back("KINDLING_RUN_INSTANCE", round.instance);
  return variables;
}

std::optional<::kindling::detail::Round> entered_round() {
  std::lock_guard<std::mutex> lock(record_lock());
  return record();
}

}  // namespace detail
}  // namespace dist
}  // namespace kindling
