// Communicator's defaults of reduce_scatter and all_gather_into (backend.h): the chunks
// exchanged point to point on the group's own send / recv, every receive posted before the
// first send (on gloo, ranks that all send first stall each other at times:
// bench/cluster/p2p_hosts.py across 4 hosts at 1 Gbit/s, 399-525 ms sends first, 286-300 ms
// receives first, for the same bytes), and reduce_scatter's chunks reduced in group-rank order.
#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "dist/backends/backend.h"
#include "kindling/error.h"

namespace kindling {
namespace dist {
namespace detail {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// The tag of every message of exchange collective #seq on a group: 16384 + seq modulo 16384, so
// that collectives in flight at once (fewer than 16384) never share one, user tags below 16384
// never meet them, and MPI's guaranteed tag bound (32767) holds.
int exchange_tag(int64_t seq) { return 16384 + static_cast<int>(seq % 16384); }

// What is left of the time until `deadline`; at least 1 ms (c10d reads 0 as "no timeout").
milliseconds left(Clock::time_point deadline) {
  return std::max(milliseconds(1), std::chrono::duration_cast<milliseconds>(deadline - Clock::now()));
}

// An exchange in flight: its messages, waited in order, then `finish` (the reduction, run once).
class ExchangeOp : public PendingOp {
 public:
  ExchangeOp(std::vector<OpPtr> parts, std::function<void()> finish, std::vector<at::Tensor> keep)
      : parts_(std::move(parts)), finish_(std::move(finish)), keep_(std::move(keep)) {}

  void wait(milliseconds timeout) override {
    const auto deadline = Clock::now() + timeout;
    for (; next_ < parts_.size(); ++next_) parts_[next_]->wait(left(deadline));
    settle();
  }

  // Engines whose waits are watched from inside (mpi): the messages are polled in short waits,
  // and from a second on `stalled` is asked about every 250 ms; a verdict ends the wait with
  // kindling::TimeoutError (messages, unlike a blocking MPI collective, can be left pending).
  void wait_watched(milliseconds timeout, const StallCheck& stalled) override {
    const auto start = Clock::now();
    const auto deadline = start + timeout;
    while (next_ < parts_.size()) {
      try {
        parts_[next_]->wait(std::min(left(deadline), milliseconds(250)));
        ++next_;
        continue;
      } catch (const EngineTimeout&) {
        if (Clock::now() >= deadline) throw;
      }
      if (Clock::now() - start < std::chrono::seconds(1)) continue;
      const std::string why = stalled();
      if (!why.empty()) throw TimeoutError(why);
    }
    settle();
  }

  // Whether every message is in (the result is written by wait()).
  bool is_completed() override {
    for (std::size_t i = next_; i < parts_.size(); ++i)
      if (!parts_[i]->is_completed()) return false;
    return true;
  }

 private:
  void settle() {
    if (!finish_) return;
    finish_();
    finish_ = nullptr;
  }

  std::vector<OpPtr> parts_;
  std::size_t next_ = 0;  // parts_ before it have been waited for
  std::function<void()> finish_;
  std::vector<at::Tensor> keep_;  // what the messages read and write, alive until they are done
};

// `into` combined with `x` by `op`, in place.
void combine(at::Tensor& into, const at::Tensor& x, ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: into.add_(x); return;
    case ReduceOp::kProduct: into.mul_(x); return;
    case ReduceOp::kMin: into = at::minimum(into, x); return;
    case ReduceOp::kMax: into = at::maximum(into, x); return;
    case ReduceOp::kAnd: into.bitwise_and_(x); return;
    case ReduceOp::kOr: into.bitwise_or_(x); return;
  }
  KINDLING_INTERNAL_ASSERT(false, "unknown ReduceOp");
}

}  // namespace

OpPtr Communicator::reduce_scatter(at::Tensor& output, at::Tensor& input, ReduceOp op, const ExchangeSlot& slot) {
  const int64_t n = output.numel();
  const int tag = exchange_tag(slot.seq);
  std::vector<at::Tensor> chunks(static_cast<std::size_t>(slot.size));  // by member: what it sent this rank
  std::vector<OpPtr> parts;
  for (int q = 0; q < slot.size && n > 0; ++q) {
    if (q == slot.rank) continue;
    at::Tensor& from = chunks[static_cast<std::size_t>(q)];
    from = at::empty({n}, output.options());
    parts.push_back(recv(from, q, tag));
  }
  chunks[static_cast<std::size_t>(slot.rank)] = input.narrow(0, slot.rank * n, n);
  for (int q = 0; q < slot.size && n > 0; ++q) {
    if (q == slot.rank) continue;
    at::Tensor piece = input.narrow(0, q * n, n);
    parts.push_back(send(piece, q, tag));
  }
  std::function<void()> finish;
  if (n > 0) {
    finish = [chunks, output, op]() mutable {
      at::Tensor sum = chunks[0].clone();
      for (std::size_t q = 1; q < chunks.size(); ++q) combine(sum, chunks[q], op);
      output.copy_(sum);
    };
  }
  return std::make_unique<ExchangeOp>(std::move(parts), std::move(finish), std::vector<at::Tensor>{output, input});
}

OpPtr Communicator::all_gather_into(at::Tensor& output, at::Tensor& input, const ExchangeSlot& slot) {
  const int64_t n = input.numel();
  const int tag = exchange_tag(slot.seq);
  std::vector<OpPtr> parts;
  for (int q = 0; q < slot.size && n > 0; ++q) {
    if (q == slot.rank) continue;
    at::Tensor into = output.narrow(0, q * n, n);
    parts.push_back(recv(into, q, tag));
  }
  for (int q = 0; q < slot.size && n > 0; ++q)
    if (q != slot.rank) parts.push_back(send(input, q, tag));
  output.narrow(0, slot.rank * n, n).copy_(input);
  return std::make_unique<ExchangeOp>(std::move(parts), std::function<void()>(),
                                      std::vector<at::Tensor>{output, input});
}

}  // namespace detail
}  // namespace dist
}  // namespace kindling
