#pragma once
// When the flight record is written without being asked (flight_dump.cpp).
#include <string>

namespace kindling {
namespace dist {
namespace detail {

struct BackendTraits;

/// A new world (install_model): empties the ring (flight_reset) and, the first time the
/// recorder is on, installs the dumps on SIGUSR1 (unless the program handles SIGUSR1 itself)
/// and on an exception that ends the program. Throws kindling::UsageError for a malformed
/// KINDLING_FLIGHT_RECORDER. `traits`: the backend's (null for an engine kindling does not know).
void flight_start_world(int rank, int world_size, const std::string& backend, const BackendTraits* traits);

/// Writes the flight record after the first failure of a collective (`reason` says which);
/// logs where, or why it could not. Never throws.
void flight_dump_after_failure(const std::string& reason) noexcept;

}  // namespace detail
}  // namespace dist
}  // namespace kindling
