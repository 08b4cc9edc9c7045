#pragma once
/// \file
/// Internal to kindling, not an API: every test of the LibTorch version that kindling's code
/// makes, outside the c10d adapter (src/dist/backends/c10d/c10d_compat.h holds c10d's). One
/// macro per difference, named for what changed and saying in which LibTorch version, so that
/// a file asks "does this LibTorch have X" and never compares version numbers itself; dropping
/// a LibTorch version means deleting its macros here and the branches that test them.
///
/// Macros, not constexpr values: each difference gates declarations or includes that do not
/// compile on the other version. CI builds LibTorch 1.13 (Debian) and 2.15 (pip); a difference
/// tested as "2.x" below is known to hold for those two, the exact 2.y it came with unchecked.
/// Public only because kindling/dist/c10d.h declares by one of them; a header-only file on
/// the lowest floor (nothing to implement), so that every floor may include it.
#include <torch/version.h>

/// Whether this LibTorch is `major.minor` or newer.
#define KINDLING_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) || (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

/// LibTorch 2.0: an engine (c10d::ProcessGroupGloo, ...) is a c10d::Backend that a
/// c10d::ProcessGroup wraps; in 1.13 the engine is the process group itself
/// (kindling/dist/c10d.h's use_process_group overload for a c10d::Backend).
#define KINDLING_TORCH_C10D_BACKEND_CLASS KINDLING_TORCH_AT_LEAST(2, 0)

/// LibTorch 2.2: c10d::TCPStore's client no longer opens a watch connection served by a
/// thread of its own; before, kindling's ranks talk to the store with a client of their own
/// (src/dist/rendezvous/store_client.cpp).
#define KINDLING_TORCH_STORE_CLIENT_HAS_WATCH_THREAD (!KINDLING_TORCH_AT_LEAST(2, 2))

/// LibTorch 2.6: torchrun's agent makes a new store for each restart and torch.distributed
/// adds no prefix to its keys; up to 2.5 one agent store served every restart, each
/// restart's keys under "/worker/attempt_<TORCHELASTIC_RESTART_COUNT>"
/// (src/dist/rendezvous/rendezvous.cpp does what its Python ranks do).
#define KINDLING_TORCH_AGENT_STORE_PER_RESTART KINDLING_TORCH_AT_LEAST(2, 6)

/// LibTorch 2.x: at::autocast's switches and dtypes take a c10::DeviceType
/// (is_autocast_enabled(t), set_autocast_dtype(t, dtype), ...); 1.13 has one function per
/// device (is_enabled / is_cpu_enabled, get_autocast_gpu_dtype / get_autocast_cpu_dtype, ...)
/// (src/engine/amp.cpp).
#define KINDLING_TORCH_AUTOCAST_BY_DEVICE_TYPE KINDLING_TORCH_AT_LEAST(2, 0)

/// LibTorch 2.x: c10/core/CachingDeviceAllocator.h, the device-generic caching allocator
/// (c10::getDeviceAllocator(c10::kCUDA): emptyCache, getDeviceStats) that kindling reaches
/// without linking CUDA; 1.13 has only CUDA's own allocator, in libtorch_cuda
/// (src/handlers/common.cpp's empty_cuda_cache, the FBResearchLogger's memory figure).
/// Tested by the header's presence, which is what the code needs.
#if __has_include(<c10/core/CachingDeviceAllocator.h>)
#define KINDLING_TORCH_DEVICE_ALLOCATOR 1
#else
#define KINDLING_TORCH_DEVICE_ALLOCATOR 0
#endif
