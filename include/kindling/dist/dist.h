#pragma once
/// \file
/// kindling::dist: one API for distributed computation over the `serial`, `gloo` (and,
/// where built, `nccl` and `mpi`) backends, modelled on ignite.distributed ("idist").
///
/// Quick tour:
/// \code
///   kindling::dist::initialize("gloo");                 // env://: RANK, WORLD_SIZE, MASTER_*
///   auto r = kindling::dist::get_rank();
///   auto t = kindling::dist::all_reduce(at::ones({4}));  // sum over ranks, in place
///   auto names = kindling::dist::all_gather(std::string("rank") + std::to_string(r));
///   kindling::dist::finalize();
/// \endcode
///
/// Rules that hold for every collective below: every rank of the group must call it, in
/// the same order, with tensors of the same dtype (and shape, unless stated otherwise).
/// Each collective has a timeout (InitOptions::timeout); a rank that waits longer throws
/// kindling::TimeoutError naming the collective and the ranks that did not arrive (on the
/// mpi backend a blocking MPI collective cannot be cancelled: past the timeout kindling prints
/// the same message and ends the job with MPI_Abort, exit code 124). An engine failure (for
/// example a peer that died) throws kindling::CommunicationError.
/// Ranks (`src`, `dst`) are always global ranks, even on a group, as in torch.distributed.
/// In the serial model (no initialize, world size 1) collectives return their input, as
/// idist's serial model does. Functions are not thread-safe with respect to each other:
/// call kindling::dist from one thread at a time.

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "kindling/dist/detail/object_collectives.h"
#include "kindling/dist/group.h"
#include "kindling/dist/reduce_op.h"
#include "kindling/dist/serialize.h"
#include "kindling/error.h"
#include "kindling/export.h"
#include "kindling/options.h"

namespace kindling {
namespace dist {

// ---------------------------------------------------------------------------------------
// Lifecycle
// ---------------------------------------------------------------------------------------

/// Options of initialize(). Chain the setters: `InitOptions().timeout(std::chrono::seconds(30))`.
struct KINDLING_API InitOptions {
  /// Where ranks meet: "env://" (MASTER_ADDR / MASTER_PORT, the default),
  /// "tcp://host:port" or "file:///path/to/shared/file". Default: "env://".
  KINDLING_ARG(std::string, init_method) = "env://";

  /// Timeout of the rendezvous and of every collective. Default: 30 minutes (as PyTorch).
  KINDLING_ARG(std::chrono::milliseconds, timeout) = std::chrono::minutes(30);

  /// Stall period: a rank waiting in a collective for a peer that has made no collective
  /// progress for this long stops with kindling::TimeoutError naming the stalled ranks
  /// (gloo and nccl-free c10d engines; see docs/fault-tolerance.md). Separate from, and
  /// normally much shorter than, timeout(). Zero turns the check off. Default: the
  /// environment's KINDLING_STALL_TIMEOUT (seconds) if set, else 60 s.
  KINDLING_ARG(std::optional<std::chrono::milliseconds>, stall_timeout);

  /// This process's rank, used when the environment has no RANK. Default: unset.
  KINDLING_ARG(std::optional<int>, rank);

  /// The number of ranks, used when the environment has no WORLD_SIZE. Default: unset.
  KINDLING_ARG(std::optional<int>, world_size);

  /// Worker threads of each gloo process group. Default: 2 (as PyTorch).
  KINDLING_ARG(int, gloo_threads) = 2;
};

/// Starts the distributed runtime on `backend` ("serial", "gloo", ...).
///
/// Rank and world size come from the launcher's environment (Slurm, torchrun / kindling-run
/// RANK and WORLD_SIZE, horovodrun, mpirun, PMIx: see kindling/dist/launch_env.h), or from
/// `options` when no launcher is detected; with neither the process becomes a 1-rank world
/// on 127.0.0.1:15000, as in idist. Missing RANK / WORLD_SIZE / LOCAL_RANK / MASTER_ADDR /
/// MASTER_PORT are written into the environment; finalize() restores it. Under torchrun's
/// agent store (TORCHELASTIC_USE_AGENT_STORE=True) every rank joins the agent's store as
/// a client. Throws kindling::UsageError for an unknown or unbuilt backend (naming the
/// available ones), a partial or malformed environment, rank >= world size, or a second
/// initialize; kindling::TimeoutError when the other ranks do not join within the timeout.
/// Where the engine itself stays blocked past the timeout (LibTorch 2.x's store client or
/// gloo with a host cut off during the rendezvous), the throw cannot happen: the process
/// then ends with exit code 1 after the timeout plus a grace of 3 s and 10%, having logged
/// the TimeoutError and written it to the launcher's error file (the same holds for new_group).
/// Under `kindling-run --live_recovery`, a rendezvous round the launcher announces while this
/// world is being made (a host lost or arriving meanwhile) gives the half-made world up: the
/// newer round's world is made instead, its rank and world size in the environment as
/// kindling/dist/live.h's rejoin() sets them (logged as a warning).
/// Every rank must call it.
KINDLING_API void initialize(const std::string& backend, const InitOptions& options = InitOptions());

/// Ends the distributed runtime: destroys the process groups, restores the environment
/// saved by initialize() and returns to the serial model. A no-op in the serial model.
KINDLING_API void finalize();

/// Picks up a distributed context created outside kindling (a process group handed over
/// with kindling::dist::use_process_group). Every query and collective does this
/// lazily while kindling is in the serial model, so calling it is rarely needed.
KINDLING_API void sync();

/// Hint for the local rank when the context is picked up by sync() and the environment
/// has no LOCAL_RANK.
KINDLING_API void set_local_rank(int local_rank);

/// Whether a distributed (non-serial) model is active.
KINDLING_API bool is_initialized();

// ---------------------------------------------------------------------------------------
// Queries
// ---------------------------------------------------------------------------------------

/// The active backend: "serial", "gloo", "nccl" or "mpi".
KINDLING_API std::string backend();
/// "serial" or "native-dist" (idist's names).
KINDLING_API std::string model_name();
/// The backends this build of kindling supports, "serial" first.
KINDLING_API std::vector<std::string> available_backends();
/// idist.has_xla_support: false. XLA (TPU) is not a kindling backend; the constant lets ported
/// `if (has_xla_support)` branches compile and take the other path.
inline constexpr bool has_xla_support = false;
/// idist.has_hvd_support: false. Horovod's library is not a kindling backend (under horovodrun,
/// kindling reads its environment and runs gloo or nccl: kindling/dist/launch_env.h).
inline constexpr bool has_hvd_support = false;
/// Global rank of this process (0 in the serial model).
KINDLING_API int get_rank();
/// Rank of this process on its node.
KINDLING_API int get_local_rank();
/// Number of ranks.
KINDLING_API int get_world_size();
/// Number of ranks per node (nodes are assumed homogeneous with contiguous rank blocks).
KINDLING_API int get_nproc_per_node();
/// Number of nodes.
KINDLING_API int get_nnodes();
/// Index of this process's node.
KINDLING_API int get_node_rank();
/// This machine's host name.
KINDLING_API std::string hostname();
/// The device this rank computes on: when LibTorch sees CUDA devices, cuda:<local_rank
/// modulo the number of visible GPUs (ranks beyond the GPU count share them; the nccl
/// backend refuses that at initialize), else cpu. initialize() makes it the current CUDA
/// device. Any rank may call it; it never communicates.
KINDLING_API c10::Device device();
/// Logs the configuration (model, backend, device, host, sizes, ranks) on rank 0 to
/// the log (info level), one "key: value" line each, and returns the text on every rank:
/// each rank's own values (rank, local rank, host name differ between ranks).
KINDLING_API std::string show_config();

// ---------------------------------------------------------------------------------------
// Groups
// ---------------------------------------------------------------------------------------

/// The world group (same as `Group{}`).
KINDLING_API Group world();
/// Creates a group of the given global ranks (sorted, without duplicates). Every rank of
/// the world must call it, members or not, in the same order. In the serial model the
/// ranks must be {0}. Throws kindling::UsageError for an empty list, duplicates or ranks
/// outside [0, world size).
KINDLING_API Group new_group(std::vector<int> ranks);

// ---------------------------------------------------------------------------------------
// Collectives on tensors
// ---------------------------------------------------------------------------------------

// ReduceOp, reduce_op_from_string and to_string(ReduceOp): kindling/dist/reduce_op.h.

/// Reduces `tensor` across the group, in place when it is contiguous and on device(), and
/// returns it (else the result is written back into `tensor`'s storage too). A rank that
/// is not a member of `group` gets its input back untouched.
KINDLING_API at::Tensor all_reduce(const at::Tensor& tensor, ReduceOp op = ReduceOp::kSum,
                                   const Group& group = Group());

/// Gathers equally shaped tensors and concatenates them along dim 0 in group-rank order:
/// shape (size * d0, d1, ...); a 0-dim tensor gives shape (size). Non-members get their
/// input back. Serial model: returns the input.
KINDLING_API at::Tensor all_gather(const at::Tensor& tensor, const Group& group = Group());

/// Gathers tensors of the same dtype and number of dimensions but different shapes.
/// `shapes[i]` is the shape of the i-th member's tensor. Returns one tensor per member.
KINDLING_API std::vector<at::Tensor> all_gather_tensors_with_shapes(const at::Tensor& tensor,
                                                                    const std::vector<std::vector<int64_t>>& shapes,
                                                                    const Group& group = Group());

/// Like all_gather_tensors_with_shapes, but the shapes (and even the number of dimensions)
/// are exchanged for you at the cost of one extra small collective.
KINDLING_API std::vector<at::Tensor> all_gather_tensors(const at::Tensor& tensor, const Group& group = Group());

/// Broadcasts `tensor` from global rank `src`; every rank passes a tensor of the same shape
/// and dtype, which receives the result in place. Returns it.
KINDLING_API at::Tensor broadcast(const at::Tensor& tensor, int src = 0, const Group& group = Group());

/// Safe-mode broadcast: only `src` needs a value; other ranks may pass std::nullopt and
/// get a new tensor of the source's shape and dtype. Costs one extra small collective.
KINDLING_API at::Tensor broadcast(const std::optional<at::Tensor>& tensor, int src = 0, const Group& group = Group());

/// Reduces `tensor` onto global rank `dst` (in place there; on other ranks its content
/// afterwards is unspecified, as in torch.distributed). Returns it.
KINDLING_API at::Tensor reduce(const at::Tensor& tensor, int dst = 0, ReduceOp op = ReduceOp::kSum,
                               const Group& group = Group());

/// Global rank `src` sends `chunks[i]` to the i-th member; every member receives into
/// `output` (same shape and dtype as the chunks) and gets it back. Other ranks pass {}.
KINDLING_API at::Tensor scatter(const at::Tensor& output, const std::vector<at::Tensor>& chunks, int src = 0,
                                const Group& group = Group());

/// Gathers equally shaped tensors onto global rank `dst`: there one tensor per member in
/// group order; an empty vector on the other ranks.
KINDLING_API std::vector<at::Tensor> gather(const at::Tensor& tensor, int dst = 0, const Group& group = Group());

/// Sends `inputs[i]` to the i-th member and returns what each member sent to this rank.
/// Inputs share one dtype; their shapes may differ (they are exchanged first).
KINDLING_API std::vector<at::Tensor> all_to_all(const std::vector<at::Tensor>& inputs, const Group& group = Group());

/// Reduces `input` over the group and leaves this rank its chunk in `output`
/// (torch.distributed.reduce_scatter_tensor): `input` holds size() equal chunks end to end
/// (size() * output.numel() elements, in flat order: shape (size * d0, ...) or (size, ...)),
/// and member i gets the reduction (`op`, sum by default) of every member's chunk i. One input
/// tensor rather than torch's list of chunks: it is what the engines' own operations take
/// (NCCL's reduce-scatter, MPI_Reduce_scatter_block) and what a flat buffer (DDP's buckets,
/// ZeRO's shards) already is, so nothing is copied to build or check a list. `output` may be
/// this rank's chunk of `input` (a view), no other part of it. Every member calls it with the
/// same sizes and dtype; the chunks are summed in group-rank order where kindling reduces
/// them itself (gloo, mpi). Returns `output`. Throws kindling::UsageError when the tensors are
/// undefined, their dtypes differ, input.numel() is not size() * output.numel(), or `op` is
/// bitwise on floating-point data; the errors of every collective otherwise. A rank outside
/// `group` gets `output` untouched; the serial model copies `input` into it.
KINDLING_API at::Tensor reduce_scatter(const at::Tensor& output, const at::Tensor& input,
                                       ReduceOp op = ReduceOp::kSum, const Group& group = Group());

/// Gathers every member's `input` into `output` in group-rank order
/// (torch.distributed.all_gather_into_tensor): `output` has size() * input.numel() elements
/// (shape (size * d0, ...) or (size, ...)), member i's tensor at [i * n, (i + 1) * n) in flat
/// order. Every member calls it with the same sizes and dtype. Returns `output`. Throws
/// kindling::UsageError when the tensors are undefined, their dtypes differ or
/// output.numel() is not size() * input.numel(); the errors of every collective otherwise. A
/// rank outside `group` gets `output` untouched; the serial model copies `input` into it.
KINDLING_API at::Tensor all_gather_into(const at::Tensor& output, const at::Tensor& input,
                                        const Group& group = Group());

/// Blocks until every member of the group arrives.
KINDLING_API void barrier(const Group& group = Group());

// ---------------------------------------------------------------------------------------
// Point-to-point (tensors must be contiguous; `tag` distinguishes messages; tags from
// 16384 up are kindling's own: reduce_scatter and all_gather_into send with them on gloo and mpi)
// ---------------------------------------------------------------------------------------

/// Sends `tensor` to global rank `dst`; returns when the data has been handed over.
KINDLING_API void send(const at::Tensor& tensor, int dst, int tag = 0, const Group& group = Group());
/// Receives into `tensor` from global rank `src` (or any rank with src = -1); returns the
/// sender's global rank.
KINDLING_API int recv(const at::Tensor& tensor, int src = -1, int tag = 0, const Group& group = Group());
/// Non-blocking send; keep `tensor` alive and unchanged until the Work is waited on.
KINDLING_API Work isend(const at::Tensor& tensor, int dst, int tag = 0, const Group& group = Group());
/// Non-blocking all_reduce (torch.distributed's async_op=True): starts reducing `tensor`
/// in place and returns at once; `Work::wait()` finishes it. The tensor must be contiguous
/// and on device(), and stay alive and untouched until then. In the serial model, or on a
/// rank outside `group`, the Work is already complete and the tensor unchanged.
KINDLING_API Work all_reduce_async(const at::Tensor& tensor, ReduceOp op = ReduceOp::kSum,
                                   const Group& group = Group());
/// Non-blocking reduce_scatter (async_op=True): starts it and returns at once; `Work::wait()`
/// finishes it, and only then does `output` hold the result. Both tensors must be contiguous
/// and on device() (kindling::UsageError otherwise, as for the sizes reduce_scatter checks),
/// and stay alive and untouched until then. Several may be in flight at once; every member
/// starts them in the same order. Serial model: `output` holds the copy at once; outside
/// `group`: a complete Work, `output` untouched.
KINDLING_API Work reduce_scatter_async(const at::Tensor& output, const at::Tensor& input,
                                       ReduceOp op = ReduceOp::kSum, const Group& group = Group());
/// Non-blocking all_gather_into, with reduce_scatter_async's rules.
KINDLING_API Work all_gather_into_async(const at::Tensor& output, const at::Tensor& input,
                                        const Group& group = Group());
/// An uninitialized tensor meant to be all-reduced many times on `group` (DDP's gradient
/// buckets use it). On the mpi backend, when every member of the group runs on this node,
/// its memory lies in the group's MPI-3 shared-memory window, and all_reduce on it reads and
/// writes the ranks' tensors where they are instead of staging them through copies (the
/// README's performance section has the figures). Elsewhere, or when the window's heap
/// (KINDLING_MPI_SHM_HEAP_MB per rank, default 256) is full, it is at::empty(sizes,
/// options). Local, not collective; usable until finalize(). Non-members and the serial
/// model get at::empty too.
KINDLING_API at::Tensor empty_comm_buffer(at::IntArrayRef sizes, const at::TensorOptions& options = {},
                                          const Group& group = Group());
/// Non-blocking receive into `tensor` (src = -1: any rank).
KINDLING_API Work irecv(const at::Tensor& tensor, int src = -1, int tag = 0, const Group& group = Group());

// ---------------------------------------------------------------------------------------
// Collectives on numbers, strings and serializable values
// ---------------------------------------------------------------------------------------

/// Reduces a number across the group and returns the result (integers stay integers).
template <typename T, detail::if_number<T> = 0>
T all_reduce(T value, ReduceOp op = ReduceOp::kSum, const Group& group = Group()) {
  if (std::is_floating_point<T>::value) {
    return static_cast<T>(detail::all_reduce_number(static_cast<double>(value), op, group));
  } else if (std::is_signed<T>::value || std::is_same<T, bool>::value) {
    return static_cast<T>(detail::all_reduce_number(static_cast<int64_t>(value), op, group));
  } else {
    return static_cast<T>(detail::all_reduce_number(static_cast<uint64_t>(value), op, group));
  }
}

/// Gathers any serializable value (see serialize.h): one entry per member, in group order.
/// Non-members and the serial model get `{value}`.
template <typename T>
std::vector<T> all_gather_object(const T& value, const Group& group = Group()) {
  if (detail::is_serial_or_nonmember(group)) return {value};
  auto parts = detail::all_gather_bytes(encode(value), group);
  std::vector<T> out;
  out.reserve(parts.size());
  for (std::size_t i = 0; i < parts.size(); ++i) {
    out.push_back(decode<T>(parts[i], detail::group_member_global_rank(group, static_cast<int>(i))));
  }
  return out;
}

/// Gathers numbers: one per member, in group order.
template <typename T, detail::if_number<T> = 0>
std::vector<T> all_gather(T value, const Group& group = Group()) {
  return all_gather_object(value, group);
}

/// Gathers strings of any byte length (UTF-8 safe: bytes are moved, never characters).
inline std::vector<std::string> all_gather(const std::string& value, const Group& group = Group()) {
  if (detail::is_serial_or_nonmember(group)) return {value};
  return detail::all_gather_bytes(value, group);
}
inline std::vector<std::string> all_gather(const char* value, const Group& group = Group()) {
  return all_gather(std::string(value), group);
}

/// Broadcasts any serializable value from global rank `src`. Every rank passes a value
/// of type T (ignored except on `src`). Returns the source's value.
template <typename T>
T broadcast_object(const T& value, int src = 0, const Group& group = Group()) {
  if (detail::is_serial_or_nonmember(group)) return value;
  const bool is_src = get_rank() == src;
  std::string bytes = is_src ? encode(value) : std::string();
  return decode<T>(detail::broadcast_bytes(is_src ? &bytes : nullptr, src, group), src);
}

/// Safe-mode broadcast of any serializable value: ranks other than `src` may pass
/// std::nullopt. A rank outside `group` that passes std::nullopt gets T{} (idist: None).
/// Throws kindling::UsageError when `src` passes std::nullopt, and in the serial model for
/// std::nullopt with src != 0 (there is no source to take the value from).
template <typename T>
T broadcast_object(const std::optional<T>& value, int src = 0, const Group& group = Group()) {
  const bool is_src = get_rank() == src;
  KINDLING_CHECK(!is_src || value.has_value(), "kindling::dist::broadcast: the source rank ", src,
                 " passed no value (std::nullopt); the source must pass the data to broadcast");
  if (detail::is_serial_or_nonmember(group)) {
    // idist returns its input here. A non-member's missing input comes back as T{} (idist's
    // None); in the serial model there is no other rank to take a value from (idist raises).
    if (value) return *value;
    KINDLING_CHECK(is_initialized() && std::is_default_constructible<T>::value, "kindling::dist::broadcast: rank ",
                   get_rank(), " passed std::nullopt but ",
                   is_initialized() ? "is not a member of the group and T has no default value"
                                    : "runs in the serial model (one process), where broadcast returns its input",
                   " (src=", src, "); pass a value on this rank");
    if constexpr (std::is_default_constructible<T>::value) return T{};
    return *value;  // not reached: the check above threw
  }
  std::string bytes = is_src ? encode(*value) : std::string();
  return decode<T>(detail::broadcast_bytes(is_src ? &bytes : nullptr, src, group), src);
}

/// Broadcasts a number or a string from `src` (exact: the value's own type is sent).
template <typename T, std::enable_if_t<std::is_arithmetic<T>::value || std::is_same<T, std::string>::value, int> = 0>
T broadcast(const T& value, int src = 0, const Group& group = Group()) {
  return broadcast_object(value, src, group);
}
/// Safe-mode broadcast of a number or string: only `src` must pass a value.
template <typename T, std::enable_if_t<std::is_arithmetic<T>::value || std::is_same<T, std::string>::value, int> = 0>
T broadcast(const std::optional<T>& value, int src = 0, const Group& group = Group()) {
  return broadcast_object(value, src, group);
}

// ---------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------

/// Wraps `fn` so that it runs only on global rank `rank` (returning std::optional of its
/// result there, std::nullopt elsewhere; nothing for void). With `with_barrier`, every rank
/// calls barrier() afterwards, so the wrapper must then be called on every rank.
template <typename F>
auto one_rank_only(F fn, int rank = 0, bool with_barrier = false) {
  return [fn = std::move(fn), rank, with_barrier](auto&&... args) {
    using R = decltype(fn(std::forward<decltype(args)>(args)...));
    if constexpr (std::is_void<R>::value) {
      if (get_rank() == rank) fn(std::forward<decltype(args)>(args)...);
      if (with_barrier) barrier();
    } else {
      std::optional<R> out;
      if (get_rank() == rank) out.emplace(fn(std::forward<decltype(args)>(args)...));
      if (with_barrier) barrier();
      return out;
    }
  };
}

/// Scope guard: the chosen rank runs the scope first, the others wait at a barrier and run
/// it afterwards (typical use: one rank downloads or prepares data). With `local`, `rank`
/// is a local rank and that local rank goes first on every node. Every rank of the world
/// must create it. Throws kindling::UsageError when `rank` is outside [0, size). If the
/// chosen rank leaves the scope by an exception it skips its barrier, so the others fail
/// with a TimeoutError rather than proceed on missing data.
class KINDLING_API OneRankFirst {
 public:
  explicit OneRankFirst(int rank = 0, bool local = false);
  ~OneRankFirst() noexcept(false);
  OneRankFirst(const OneRankFirst&) = delete;
  OneRankFirst& operator=(const OneRankFirst&) = delete;

 private:
  bool chosen_ = false;
  int uncaught_ = 0;
};

/// Function form of OneRankFirst: runs `fn` on the chosen rank first, then on the others.
template <typename F>
auto one_rank_first(F&& fn, int rank = 0, bool local = false) {
  OneRankFirst guard(rank, local);
  return fn();
}

}  // namespace dist
}  // namespace kindling
