#pragma once
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <memory>

#include "dist/backends/backend.h"

namespace kindling {
namespace dist {
namespace detail {

/// Creates the gloo backend: rendezvous, world ProcessGroupGloo and Python-compatible
/// start-up (store layout, store-based barrier, sequence number).
std::unique_ptr<Backend> make_gloo_backend(const WorldConfig& config);

/// Wraps a user-made c10d process group (kindling/dist/c10d.h).
std::unique_ptr<Backend> make_external_c10d_backend(c10::intrusive_ptr<c10d::ProcessGroup> pg,
                                                    c10::intrusive_ptr<c10d::Store> store, std::string name,
                                                    std::chrono::milliseconds timeout);

}  // namespace detail
}  // namespace dist
}  // namespace kindling
