#pragma once
// State dicts copied down to their tensors (cloned), so that a copy keeps the values it had
// when the objects it was read from change: what a failed load puts back, what live recovery
// commits. Internal to src/handlers/checkpointing/ (defined in stateful.cpp).
#include <ATen/core/ivalue.h>

namespace kindling {
namespace detail {

/// A copy of `value` that shares no tensor storage with it: tensors detached and cloned,
/// dicts, lists and tuples rebuilt (their key and element types kept) at any depth; numbers,
/// strings and None as they are (immutable). A copy, not a pickle: a ResNet-18's state with
/// its momentum is pickled in about 140 ms, copied in a fraction of that (bench_engine's
/// LiveCommit). Local; throws what cloning a tensor throws.
c10::IValue deep_copy(const c10::IValue& value);

}  // namespace detail
}  // namespace kindling
