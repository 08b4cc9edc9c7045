#pragma once
/// \file
/// Interoperability with LibTorch's c10d: hand kindling a process group you made yourself.
///
/// \code
///   auto pg = c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, size, opts);
///   kindling::dist::use_process_group(pg, store);
///   kindling::dist::get_world_size();   // picked up lazily: == size
/// \endcode
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <string>
#include <type_traits>

#include "kindling/detail/torch_compat.h"
#include "kindling/export.h"

namespace kindling {
namespace dist {
/// Registers `pg` (with the store it was created from, needed only by new_group) as the
/// context that kindling picks up on its next call while in the serial model (idist's
/// lazy `sync`). `backend` names the engine ("gloo"); `timeout` bounds kindling's waits.
/// finalize() forgets it; the process group itself stays the caller's.
KINDLING_API void use_process_group(c10::intrusive_ptr<::c10d::ProcessGroup> pg,
                                    c10::intrusive_ptr<::c10d::Store> store = {}, std::string backend = "gloo",
                                    std::chrono::milliseconds timeout = std::chrono::minutes(30));

#if KINDLING_TORCH_C10D_BACKEND_CLASS
/// LibTorch 2.x, where an engine such as c10d::ProcessGroupGloo is a c10d::Backend rather
/// than a process group: kindling wraps `engine` in a c10d::ProcessGroup that serves CPU
/// and CUDA tensors ("gloo") or CUDA tensors ("nccl"), as torch.distributed does, then
/// behaves as the overload above.
KINDLING_API void use_process_group(c10::intrusive_ptr<::c10d::Backend> engine,
                                    c10::intrusive_ptr<::c10d::Store> store = {}, std::string backend = "gloo",
                                    std::chrono::milliseconds timeout = std::chrono::minutes(30));

/// The same for a pointer to a concrete engine (c10d::ProcessGroupGloo, ...): intrusive_ptr
/// converts to both overloads' types, so this picks the c10d::Backend one.
template <typename Engine, std::enable_if_t<std::is_base_of<::c10d::Backend, Engine>::value, int> = 0>
void use_process_group(c10::intrusive_ptr<Engine> engine, c10::intrusive_ptr<::c10d::Store> store = {},
                       std::string backend = "gloo", std::chrono::milliseconds timeout = std::chrono::minutes(30)) {
  use_process_group(c10::intrusive_ptr<::c10d::Backend>(std::move(engine)), std::move(store), std::move(backend),
                    timeout);
}
#endif

}  // namespace dist
}  // namespace kindling
