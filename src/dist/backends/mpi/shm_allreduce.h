#pragma once
// All-reduce over a shared-memory window, for MPI communicators whose members all run on
// one node. Open MPI's own MPI_Allreduce on shared memory moves every byte through its
// fragment queues; this one lets each rank reduce its block of a segment straight out of
// the other ranks' staging slots (a reduce-scatter followed by an all-gather, both by
// plain loads and stores), synchronized by per-rank progress counters in the window.
//
// Protocol for segment s (s = 1, 2, ...), rank r of n, slot = s % kSlots:
//   1. wait until every rank finished segment s - kSlots (its slot is free again);
//      copy the blocks other ranks reduce into my slot; arrived[r] = s
//   2. wait for arrived[q] = s for all q; reduce my block r from my tensor and every
//      peer's slot into my tensor and my slot; reduced[r] = s
//   3. wait for reduced[q] = s; copy block q from q's slot into my tensor; finished[r] = s
// Every block is reduced once, in rank order, so all ranks get bit-identical results.
#include "dist/backends/mpi/mpi_c.h"

#include <ATen/core/Tensor.h>
#include <c10/core/TensorOptions.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "dist/backends/backend.h"
#include "kindling/dist/reduce_op.h"

namespace kindling {
namespace dist {
namespace detail {

struct ShmHeap;  // shm_heap.h

class ShmAllreduce {
 public:
  /// Null unless every member of `comm` shares memory with this rank (one node) and the
  /// communicator has more than one member. Collective over `comm`.
  static std::unique_ptr<ShmAllreduce> create(MPI_Comm comm);
  ~ShmAllreduce();

  /// True when this path can reduce `t` with `op`: a dtype and op it has kernels for,
  /// and at least `min_bytes()` bytes (below that MPI's own call is faster).
  bool handles(const at::Tensor& t, ReduceOp op) const;
  static std::int64_t min_bytes();

  /// An uninitialized tensor in this rank's part of the window (the heap): all_reduce on
  /// it reads and writes it in place from every rank, with no staging copies. An ordinary
  /// tensor when the heap is full. Local, not collective.
  at::Tensor empty(at::IntArrayRef sizes, const at::TensorOptions& options);

  /// Reduces contiguous `t` in place. Throws std::runtime_error naming the ranks when
  /// peers do not arrive within `timeout` or called with a different tensor or op; the
  /// path is then unusable (later calls throw) because the peers' counters disagree. Asks
  /// `stalled` (when given) every 250 ms after a second of waiting, and ends the job on a
  /// non-empty answer (end_job_for_stall in mpi_op.h).
  void run(at::Tensor& t, ReduceOp op, std::chrono::milliseconds timeout, const StallCheck* stalled = nullptr);

 private:
  ShmAllreduce() = default;
  struct Control;
  Control* control(int rank) const;
  char* slot(int rank, std::int64_t s) const;
  void wait_all(int which, std::int64_t value, const char* phase, std::chrono::steady_clock::time_point deadline,
                std::chrono::milliseconds timeout);
  void wait_for(int rank, int which, std::int64_t value, const char* phase,
                std::chrono::steady_clock::time_point deadline, std::chrono::milliseconds timeout);
  // The phases of one segment of run() (shm_allreduce.cpp): announce it, reduce this rank's
  // block, collect the others'.
  struct Call;
  struct Segment;
  void announce(const Call& call, const Segment& seg);
  bool locate_peers(const Call& call, const Segment& seg, std::vector<char*>& where);
  void reduce_block(const Call& call, const Segment& seg, const std::vector<char*>& where);
  void collect(const Call& call, const Segment& seg, const std::vector<char*>& where);

  // The stall check of the run in progress and when to ask it next.
  const StallCheck* stalled_ = nullptr;
  std::chrono::steady_clock::time_point next_check_;

  MPI_Comm comm_ = MPI_COMM_NULL;  // a duplicate, owned
  MPI_Win win_ = MPI_WIN_NULL;
  int rank_ = 0;
  int size_ = 1;
  std::shared_ptr<ShmHeap> heap_;
  std::vector<char*> base_;  // each rank's segment of the window, mapped here
  std::int64_t seq_ = 0;     // segments completed by this rank
  bool broken_ = false;
};

}  // namespace detail
}  // namespace dist
}  // namespace kindling
