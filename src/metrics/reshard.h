#pragma once
// A metric accumulator saved at one world size, given to a rank of a run at another
// (metrics::Metric::Reshard). Internal to src/metrics/.
#include <ATen/core/List.h>
#include <ATen/core/ivalue.h>

#include <string>

#include "kindling/metrics/metric.h"

namespace kindling {
namespace detail {

/// This rank's value of the accumulator `key` of metric `who` from the saved ranks' values
/// (`saved`, one per saved rank) in a run of `world` ranks, by `rule`. Local. Throws
/// kindling::UsageError for kRefuse, for values that cannot be combined (replicated values
/// that differ, sums of mismatched shapes), naming the key, the ranks and what to do.
c10::IValue reshard_metric_state(metrics::Metric::Reshard rule, const c10::impl::GenericList& saved, int64_t rank,
                                 int64_t world, const std::string& who, const std::string& key);

}  // namespace detail
}  // namespace kindling
