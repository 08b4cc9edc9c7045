// --timeline N:M: every rank's iterations N to M as a Chrome trace in the run folder's timeline/
// (kindling::handlers::Timeline; docs/debugging.md reads one).
#pragma once

#include <kindling/engine/engine.h>
#include <kindling/handlers/profilers/timeline.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace cifar10 {

/// The first and last iteration of "N:M" (1 <= N <= M); throws kindling::UsageError naming
/// --timeline and the text for anything else.
std::pair<int64_t, int64_t> timeline_range(const std::string& text);

/// A Timeline of the iterations `range` names on `trainer`, written into `folder`, showing the
/// `watched` engines (an evaluator and its name) in detail. Every rank calls it.
std::shared_ptr<kindling::handlers::Timeline> attach_timeline(
    const std::string& range, const std::string& folder, kindling::engine::Engine& trainer,
    const std::vector<std::pair<kindling::engine::Engine*, std::string>>& watched);

}  // namespace cifar10
