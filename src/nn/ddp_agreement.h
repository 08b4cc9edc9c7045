#pragma once
// What every rank's DistributedDataParallel must agree on beyond the model: the options that
// change what the ranks exchange (bucket size, unused-parameter search, buffer broadcast,
// synchronized BatchNorm, communication hook). Ranks given different ones would exchange
// different buffers and wait on each other until the stall verdict; instead DDP's
// construction compares them once and refuses a mismatch on every rank.
#include <string>
#include <vector>

#include "kindling/nn/ddp.h"

namespace kindling {
namespace nn {
namespace detail {

/// The options of `o` that must agree, as space-separated "name=value" words (the
/// hierarchical all-reduce is decided later from the hosts, the same on every rank). Local;
/// never throws.
std::string options_text(const DdpOptions& o);

/// Throws kindling::UsageError, on every rank that calls it with the same `all`, when a
/// rank's options differ from the first rank's, naming each option, both ranks and their
/// values. `all[r]` begins with rank `ranks[r]`'s options_text(), up to a newline or its
/// end. Local: the caller exchanged `all` (every rank of the group holds the same).
void check_options_agree(const std::vector<std::string>& all, const std::vector<int>& ranks);

}  // namespace detail
}  // namespace nn
}  // namespace kindling
