#pragma once
/// \file
/// Settings that every rank must give the same value, checked once where they are set (DDP's
/// options, the supervised trainer's AMP): ranks that disagree would otherwise exchange
/// different buffers, or compute differently, and only stall or drift later.
///
/// \code
///   kindling::dist::require_same_settings("my_trainer", {{"amp", amp ? "on" : "off"}});
/// \endcode

#include <string>
#include <utility>
#include <vector>

#include "kindling/dist/group.h"
#include "kindling/export.h"

namespace kindling {
namespace dist {

/// (name, value) pairs, in the same order (with the same names) on every rank.
using Settings = std::vector<std::pair<std::string, std::string>>;

/// Exchanges `settings` in one all_gather over `group` and, when a member's value of a setting
/// differs from the group's first member's, throws kindling::UsageError on every member,
/// naming `who`, each setting that differs, both ranks and their values. Nothing happens in
/// serial mode or on a rank outside `group`. Collective over `group`: every member calls it,
/// with the same names in the same order.
KINDLING_API void require_same_settings(const std::string& who, const Settings& settings, const Group& group = Group());

}  // namespace dist
}  // namespace kindling
