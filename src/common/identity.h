#pragma once
// Who this process is in the distributed model, for messages: the one place that the lowest
// floor (errors, the log) reads it from, so that common/ never includes the runtime. The
// runtime sets it when a distributed model is installed and clears it at finalize().
#include <optional>
#include <utility>

namespace kindling {
namespace detail {

/// Records rank and world size of the model just installed. Any thread; never throws.
void set_identity(int rank, int world_size);
/// Back to the serial model. Any thread; never throws.
void clear_identity();
/// (rank, world size) of the active distributed model, or nullopt in the serial model.
std::optional<std::pair<int, int>> identity();

}  // namespace detail
}  // namespace kindling
