#pragma once
// Internal to initialize() (runtime.cpp): what the ranks must agree on, exchanged once when
// the world is made, and the check of kindling's own environment variables. A rank whose
// settings differ from the others' (fingerprints on one rank only, another backend, other
// shared-memory sizes) would otherwise hang at its first collective until the timeout.
#include <optional>
#include <string>
#include <vector>

#include "dist/runtime_state.h"

namespace kindling {
namespace dist {
namespace detail {

/// Checks every KINDLING_* variable of this process: the values of the known ones (throws
/// kindling::UsageError naming the variable, the value and what is accepted) and the names
/// (an unknown KINDLING_* name, e.g. a misspelling, is logged as a warning with the known
/// names). Local; called by initialize() for every backend, serial included.
void validate_kindling_environment();

/// Every kindling rank's `mine` under "kindling/<topic>/<rank>" in the rendezvous store:
/// one entry per rank, unset for a rank that is not a kindling process (a plain
/// torch.distributed peer, which never writes). Without a store (mpi), an all_gather on
/// the world's engine. Empty for an external (user-made) group: its members are unknown.
/// Throws kindling::TimeoutError when a kindling rank does not write within the timeout.
/// Every rank of the world calls it.
std::vector<std::optional<std::string>> exchange(Runtime& rt, const std::string& topic, const std::string& mine);

/// Exchanges this rank's settings that must be equal on every rank (backend, kindling and
/// LibTorch versions, collective fingerprints, the mpi shared-memory sizes) and throws
/// kindling::UsageError on every rank, naming each setting that differs with every rank's
/// value, when they do not agree. Every rank of the world calls it, once, in initialize().
void check_settings_agree(Runtime& rt);

}  // namespace detail
}  // namespace dist
}  // namespace kindling
