// Communicator's defaults of reduce_scatter and all_gather_into (backend.h): the chunks
// exchanged point to point on the group's own send / recv, every receive posted before the
// first send (on gloo, ranks that all send first stall each other at times:
// bench/cluster/p2p_hosts.py across 4 hosts at 1 Gbit/s, 399-525 ms sends first, 286-300 ms
// receives first, for the same bytes), and reduce_scatter's chunks reduced in group-rank order.
#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
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

// The messages of an exchange, waited in order. Messages that can be waited on in short waits
// (mpi's) are polled by the caller's waits; the others (gloo's, see PendingOp::rewaitable) are
// waited on by a thread of their own, with the group's timeout, and the caller waits for it.
class Messages {
 public:
  Messages(std::vector<OpPtr> parts, milliseconds patience) : parts_(std::move(parts)) {
    bool rewaitable = true;
    for (const auto& p : parts_) rewaitable = rewaitable && p->rewaitable();
    if (rewaitable) return;
    background_ = std::make_shared<Background>();
    background_->parts = std::move(parts_);
    std::thread([b = background_, patience] {
      std::exception_ptr error;
      try {
        for (auto& p : b->parts) p->wait(patience);
      } catch (...) {
        error = std::current_exception();
      }
      std::lock_guard<std::mutex> lock(b->mu);
      b->error = error;
      b->done = true;
      b->cv.notify_all();
    }).detach();  // owns the messages: a stalled one may keep it past the caller's wait
  }

  // Waits up to `timeout` for every message: true once all are in, false when the time is up;
  // throws a message's failure.
  bool wait(milliseconds timeout) {
    const auto deadline = Clock::now() + timeout;
    if (background_) {
      std::unique_lock<std::mutex> lock(background_->mu);
      if (!background_->cv.wait_for(lock, timeout, [this] { return background_->done; })) return false;
      if (background_->error) std::rethrow_exception(background_->error);
      return true;
    }
    for (; next_ < parts_.size(); ++next_) {
      try {
        parts_[next_]->wait(left(deadline));
      } catch (const EngineTimeout&) {  // harmless here (rewaitable): not in yet
        return false;
      }
    }
    return true;
  }

  bool is_completed() {
    if (background_) {
      std::lock_guard<std::mutex> lock(background_->mu);
      return background_->done;
    }
    for (std::size_t i = next_; i < parts_.size(); ++i)
      if (!parts_[i]->is_completed()) return false;
    return true;
  }

 private:
  struct Background {
    std::vector<OpPtr> parts;
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    std::exception_ptr error;
  };
  std::vector<OpPtr> parts_;
  std::size_t next_ = 0;  // parts_ before it are in
  std::shared_ptr<Background> background_;
};

// An exchange in flight: its messages, then `finish` (the reduction, run once by the waiter).
class ExchangeOp : public PendingOp {
 public:
  ExchangeOp(std::vector<OpPtr> parts, const ExchangeSlot& slot, std::function<void()> finish,
             std::vector<at::Tensor> keep)
      : keep_(std::move(keep)),  // first: what the messages read and write outlives them
        messages_(std::move(parts), slot.timeout + std::chrono::seconds(5)),
        finish_(std::move(finish)),
        seq_(slot.seq) {}

  void wait(milliseconds timeout) override {
    if (!messages_.wait(timeout)) throw EngineTimeout(not_in(timeout));
    settle();
  }

  // Engines whose waits are watched from inside (mpi): short waits, and from a second on
  // `stalled` is asked about every 250 ms; a verdict ends the wait with kindling::TimeoutError
  // (messages, unlike a blocking MPI collective, can be left pending).
  void wait_watched(milliseconds timeout, const StallCheck& stalled) override {
    const auto start = Clock::now();
    const auto deadline = start + timeout;
    while (!messages_.wait(std::min(left(deadline), milliseconds(250)))) {
      if (Clock::now() >= deadline) throw EngineTimeout(not_in(timeout));
      if (Clock::now() - start < std::chrono::seconds(1)) continue;
      const std::string why = stalled();
      if (!why.empty()) throw TimeoutError(why);
    }
    settle();
  }

  // Whether every message is in (the result is written by wait()).
  bool is_completed() override { return messages_.is_completed(); }

 private:
  std::string not_in(milliseconds timeout) const {
    return "the messages of exchange collective #" + std::to_string(seq_) + " did not all arrive within " +
           std::to_string(timeout.count()) + " ms";
  }
  void settle() {
    if (!finish_) return;
    finish_();
    finish_ = nullptr;
  }

  std::vector<at::Tensor> keep_;
  Messages messages_;
  std::function<void()> finish_;
  int64_t seq_ = 0;
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
  return std::make_unique<ExchangeOp>(std::move(parts), slot, std::move(finish),
                                      std::vector<at::Tensor>{output, input});
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
  return std::make_unique<ExchangeOp>(std::move(parts), slot, std::function<void()>(),
                                      std::vector<at::Tensor>{output, input});
}

}  // namespace detail
}  // namespace dist
}  // namespace kindling
