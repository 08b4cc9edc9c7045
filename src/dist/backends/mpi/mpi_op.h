#pragma once
// Internal to the mpi backend: MPI error and type helpers, and MpiOp, one started MPI
// operation (a PendingOp) with its requests, the tensors they use and a completion action.

#include "dist/backends/mpi/mpi_c.h"

#include <ATen/core/Tensor.h>

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "dist/backends/backend.h"
#include "kindling/dist/reduce_op.h"

namespace kindling {
namespace dist {
namespace detail {

/// MPI's text for the error `code`.
std::string mpi_error(int code);

/// Throws std::runtime_error naming `call` unless `code` is MPI_SUCCESS.
void check(int code, const char* call);

/// MPI datatypes for a tensor's elements. `for_reduction` rejects types MPI cannot add up.
MPI_Datatype mpi_type(at::ScalarType t, bool for_reduction);

/// The MPI reduction for `op` on elements of type `t`; throws for ops MPI lacks on `t`.
MPI_Op mpi_op(ReduceOp op, at::ScalarType t);

/// The element count of `t` as MPI's int; throws above 2^31-1.
int count_of(const at::Tensor& t);

/// Logs `why` (a stall verdict, dist/collectives/call.cpp) and ends the whole job with MPI_Abort: a rank
/// that waits on a stalled peer can neither leave a blocking MPI call nor free collective
/// resources (windows, communicators) or finalize MPI without it. Any thread may call it.
[[noreturn]] void end_job_for_stall(std::string why, const char* call);

/// One started operation: its requests, the tensors they use, and what to do on completion.
/// A deferred operation (blocking collectives) runs its call in wait(), under the watchdog.
class MpiOp : public PendingOp {
 public:
  MpiOp(const char* call, std::vector<at::Tensor> keep, std::function<void()> on_done = {})
      : call_(call), keep_(std::move(keep)), on_done_(std::move(on_done)) {}

  void defer(std::function<int()> blocking) { blocking_ = std::move(blocking); }
  // A deferred operation that keeps its own time (throws on timeout) and asks the stall
  // check itself (may be null): no watchdog.
  using Timed = std::function<void(std::chrono::milliseconds, const StallCheck*)>;
  void defer_timed(Timed timed) { timed_ = std::move(timed); }

  MPI_Request* add_request() {
    requests_.emplace_back(MPI_REQUEST_NULL);
    return &requests_.back();
  }

  void wait(std::chrono::milliseconds timeout) override { wait_for(timeout, nullptr); }
  void wait_watched(std::chrono::milliseconds timeout, const StallCheck& stalled) override {
    wait_for(timeout, &stalled);
  }

  bool is_completed() override { return (blocking_ || timed_) ? done_ : test(); }
  int source_rank() override { return source_; }

 private:
  bool test();
  void wait_for(std::chrono::milliseconds timeout, const StallCheck* stalled);

  const char* call_;
  std::vector<at::Tensor> keep_;
  std::function<void()> on_done_;
  std::function<int()> blocking_;
  Timed timed_;
  std::vector<MPI_Request> requests_;
  int source_ = -1;
  bool done_ = false;
};

}  // namespace detail
}  // namespace dist
}  // namespace kindling
