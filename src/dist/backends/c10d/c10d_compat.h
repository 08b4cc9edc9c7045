#pragma once
// The one place where kindling's c10d code differs between LibTorch 1.13 and 2.x.
//
// 1.13: an engine (ProcessGroupGloo, ProcessGroupNCCL) *is* a c10d::ProcessGroup.
// 2.x:  an engine is a c10d::Backend; a c10d::ProcessGroup holds one backend per device
//       type and dispatches each call by the tensors' device (what torch.distributed's
//       _new_process_group_helper builds).
// Everything else kindling calls (collectives but the names of all_to_all, the flat reduce-scatter and
// all-gather, Work, stores, Options) has the same signature in both. (torchrun's agent-store prefix, which changed in 2.6, is torchrun's rule
// and lives with the rendezvous: src/dist/rendezvous/rendezvous.cpp.)
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/version.h>

#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

namespace kindling {
namespace dist {
namespace detail {

/// An all-to-all of one tensor with split sizes: ProcessGroup::all_to_all_single where the
/// LibTorch has it (it deprecates alltoall_base, the name 1.13 and earlier 2.x releases such as
/// the GPU machine's 2.11 have); chosen by overload, so the older name is never compiled where
/// it is deprecated. Every rank of the group calls it.
template <typename PG>
auto all_to_all_single(PG& pg, at::Tensor& out, at::Tensor& in, std::vector<int64_t>& out_splits,
                       std::vector<int64_t>& in_splits, int /*prefer*/)
    -> decltype(pg.all_to_all_single(out, in, out_splits, in_splits)) {
  return pg.all_to_all_single(out, in, out_splits, in_splits);
}
template <typename PG>
c10::intrusive_ptr<::c10d::Work> all_to_all_single(PG& pg, at::Tensor& out, at::Tensor& in,
                                                   std::vector<int64_t>& out_splits, std::vector<int64_t>& in_splits,
                                                   long /*fallback*/) {
  return pg.alltoall_base(out, in, out_splits, in_splits);
}

/// A reduce-scatter of one flat tensor (input: the group's size times output's elements):
/// ProcessGroup::reduce_scatter_single where the LibTorch has it (2.15 deprecates
/// _reduce_scatter_base, the name of 1.13 and of earlier 2.x releases); chosen by overload as
/// all_to_all_single. Every rank of the group calls it.
template <typename PG>
auto reduce_scatter_single(PG& pg, at::Tensor& out, at::Tensor& in, const ::c10d::ReduceScatterOptions& opts,
                           int /*prefer*/) -> decltype(pg.reduce_scatter_single(out, in, opts)) {
  return pg.reduce_scatter_single(out, in, opts);
}
template <typename PG>
c10::intrusive_ptr<::c10d::Work> reduce_scatter_single(PG& pg, at::Tensor& out, at::Tensor& in,
                                                       const ::c10d::ReduceScatterOptions& opts, long /*fallback*/) {
  return pg._reduce_scatter_base(out, in, opts);
}

/// An all-gather into one flat tensor (output: the group's size times input's elements):
/// ProcessGroup::all_gather_single where the LibTorch has it (2.15 deprecates _allgather_base,
/// the name of 1.13 and of earlier 2.x releases). Every rank of the group calls it.
template <typename PG>
auto all_gather_single(PG& pg, at::Tensor& out, at::Tensor& in, int /*prefer*/)
    -> decltype(pg.all_gather_single(out, in)) {
  return pg.all_gather_single(out, in);
}
template <typename PG>
c10::intrusive_ptr<::c10d::Work> all_gather_single(PG& pg, at::Tensor& out, at::Tensor& in, long /*fallback*/) {
  return pg._allgather_base(out, in);
}

#if TORCH_VERSION_MAJOR >= 2
/// The type of a c10d engine instance (ProcessGroupGloo, ProcessGroupNCCL).
using C10dEngine = ::c10d::Backend;
#else
using C10dEngine = ::c10d::ProcessGroup;
#endif

/// The store of group `group_name` ("0" world, "<k>" k-th new_group) under the job's
/// store, with torch.distributed's prefix: "<name>" in 1.13, "<name>/" in 2.x.
inline c10::intrusive_ptr<::c10d::Store> group_store(const c10::intrusive_ptr<::c10d::Store>& store,
                                                     const std::string& group_name) {
#if TORCH_VERSION_MAJOR >= 2
  return c10::make_intrusive<::c10d::PrefixStore>(group_name + "/", store);
#else
  return c10::make_intrusive<::c10d::PrefixStore>(group_name, store);
#endif
}

/// The store an engine of a group uses: 2.x gives each engine "<device>/" under the group's
/// store, named after the first device type it serves ("cpu" for gloo, "cuda" for nccl);
/// 1.13 uses the group's store itself.
inline c10::intrusive_ptr<::c10d::Store> engine_store(const c10::intrusive_ptr<::c10d::Store>& group,
                                                      const std::string& device) {
#if TORCH_VERSION_MAJOR >= 2
  return c10::make_intrusive<::c10d::PrefixStore>(device + "/", group);
#else
  (void)device;
  return group;
#endif
}

/// Where an engine serves tensors: CPU, CUDA or both (gloo serves both, nccl CUDA only).
struct EngineDevices {
  bool cpu = true;
  bool cuda = false;
};

/// The process group through which kindling calls `engine` (named "gloo" or "nccl"):
/// in 1.13 the engine itself; in 2.x a ProcessGroup over `store` that routes the device
/// types in `devices` to it, with `group_name` as torch.distributed names its groups
/// ("0" for the world, "<k>" for the k-th new_group). `bound_device` (2.x) tells the
/// engine which GPU this rank uses, as torch.distributed's device_id does.
inline c10::intrusive_ptr<::c10d::ProcessGroup> as_process_group(
    c10::intrusive_ptr<C10dEngine> engine, const c10::intrusive_ptr<::c10d::Store>& store, const std::string& name,
    EngineDevices devices, const std::string& group_name, std::optional<c10::Device> bound_device = std::nullopt) {
#if TORCH_VERSION_MAJOR >= 2
  using PG = ::c10d::ProcessGroup;
  const PG::BackendType type = name == "nccl" ? PG::BackendType::NCCL : PG::BackendType::GLOO;
  auto pg = c10::make_intrusive<PG>(store, engine->getRank(), engine->getSize());
  pg->setDefaultBackend(type);
  if (bound_device) pg->setBoundDeviceId(bound_device);
  if (devices.cpu) pg->setBackend(c10::DeviceType::CPU, type, engine);
  if (devices.cuda) pg->setBackend(c10::DeviceType::CUDA, type, engine);
  pg->setGroupName(group_name);
  return pg;
#else
  (void)store, (void)name, (void)devices, (void)group_name, (void)bound_device;
  return engine;
#endif
}

/// Whether torch.distributed of this LibTorch version passes a store-based barrier right
/// after creating the world group: always in 1.13; in 2.x only with
/// TORCH_DIST_INIT_BARRIER=1. kindling does the same so that mixed C++/Python jobs agree.
inline bool world_store_barrier() {
#if TORCH_VERSION_MAJOR >= 2
  const char* v = std::getenv("TORCH_DIST_INIT_BARRIER");
  return v != nullptr && std::strcmp(v, "1") == 0;
#else
  return true;
#endif
}

/// Releases the engines of a process group kindling made, before it is destroyed (2.x's
/// ProcessGroup::shutdown; destroying a ProcessGroupNCCL without it leaks its resources
/// and warns). 1.13 has nothing to call.
inline void shutdown_process_group(::c10d::ProcessGroup& pg) {
#if TORCH_VERSION_MAJOR >= 2
  pg.shutdown();
#else
  (void)pg;
#endif
}

/// Makes c10d's NCCL watchdog abort a failed or timed-out communicator and hand the
/// error to the waiting rank as an exception (2.x: TORCH_NCCL_ASYNC_ERROR_HANDLING=2,
/// "clean up only"; 1.13 knows only NCCL_ASYNC_ERROR_HANDLING=1, which also ends the
/// process). A value the user set is kept.
inline void enable_nccl_async_errors() {
#if TORCH_VERSION_MAJOR >= 2
  ::setenv("TORCH_NCCL_ASYNC_ERROR_HANDLING", "2", 0);
#else
  ::setenv("NCCL_ASYNC_ERROR_HANDLING", "1", 0);
#endif
}

namespace compat_detail {
template <typename PG>
auto start_sequence_numbers(PG& pg, int) -> decltype(pg.setSequenceNumberForGroup(), void()) {
  pg.setSequenceNumberForGroup();
}
template <typename PG>
void start_sequence_numbers(PG&, long) {}
}  // namespace compat_detail

/// Starts the group's collective sequence numbers as torch.distributed does after making a
/// group (1.13 and early 2.x: setSequenceNumberForGroup; LibTorch 2.15 numbers collectives by
/// itself and has no such call, so there is nothing to do).
inline void start_sequence_numbers(::c10d::ProcessGroup& pg) { compat_detail::start_sequence_numbers(pg, 0); }

/// The store key of torch.distributed's store-based barrier after creating group
/// `group_index` (0 = world): 1.13 counts groups from 1, 2.x uses the group's name.
inline std::string store_barrier_key(int group_index) {
#if TORCH_VERSION_MAJOR >= 2
  return "store_based_barrier_key:" + std::to_string(group_index);
#else
  return "store_based_barrier_key:" + std::to_string(group_index + 1);
#endif
}

/// The base of a store class of kindling's own: c10d::Store, whose 2.x asks every store for
/// clone() (pure virtual there: a handle to the same store that another thread may use),
/// answered by `Derived::clone_store()`; 1.13's Store has no clone().
template <typename Derived>
class StoreBase : public ::c10d::Store {
 public:
  using ::c10d::Store::Store;
#if TORCH_VERSION_MAJOR >= 2
  c10::intrusive_ptr<::c10d::Store> clone() override { return static_cast<Derived&>(*this).clone_store(); }
#endif
};

/// A handle to the same store as `store` for another thread: 2.x's Store::clone(); on 1.13,
/// where no engine asks for one, `store` itself.
inline c10::intrusive_ptr<::c10d::Store> clone_of(const c10::intrusive_ptr<::c10d::Store>& store) {
#if TORCH_VERSION_MAJOR >= 2
  return store->clone();
#else
  return store;
#endif
}

}  // namespace detail
}  // namespace dist
}  // namespace kindling
