#pragma once
// Collective fingerprints (opt-in: KINDLING_DISTRIBUTED_DEBUG=DETAIL, or torch's
// TORCH_DISTRIBUTED_DEBUG=DETAIL): before each collective every member writes
// "<op> <dtype> <shape>" under "kindling/fp/<group>/<seq>/<group rank>" in the rendezvous
// store and reads the others'; a difference is a kindling::UsageError on every member that
// lists each rank's call, instead of a hang or silently wrong data. Costs a few store round
// trips per collective (bench/collectives measures it). A member deletes its own entry of
// two collectives back: by then every member has read it.
#include <ATen/core/Tensor.h>

#include <cstdint>

#include "dist/backends/backend.h"

namespace kindling {
namespace dist {
namespace detail {

/// Whether fingerprints are on (read once from the environment).
bool fingerprints_enabled();

/// Compares collective #seq `op` on `g` across its members; `tensor` (may be null) gives
/// dtype and shape, `same_shape` whether the shapes must agree too. Throws
/// kindling::UsageError on a mismatch, kindling::TimeoutError when a member does not arrive
/// within the group timeout. Does nothing without a store.
void check_fingerprint(const GroupState& g, int64_t seq, const char* op, const at::Tensor* tensor, bool same_shape);

}  // namespace detail
}  // namespace dist
}  // namespace kindling
