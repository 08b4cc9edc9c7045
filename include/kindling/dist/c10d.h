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

}  // namespace dist
}  // namespace kindling
