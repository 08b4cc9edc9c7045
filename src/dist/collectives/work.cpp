// Asynchronous operations: all_reduce_async and the Work handle that every asynchronous
// call returns (wait, completion, sender of a receive, wait-on-destruction).
#include <ATen/ATen.h>

#include <string>

#include "dist/collectives/call.h"
#include "kindling/log.h"

namespace kindling {
namespace dist {

using detail::participant;

namespace detail {
namespace {
// An operation that is complete from the start (serial model, non-members).
class DoneOp : public PendingOp {
 public:
  void wait(std::chrono::milliseconds) override {}
  bool is_completed() override { return true; }
};
}  // namespace

Work done_work(const char* name) {
  auto done = std::make_shared<WorkState>();
  done->name = name;
  done->op = std::make_unique<DoneOp>();
  return Work(done);
}
}  // namespace detail

Work all_reduce_async(const at::Tensor& tensor, ReduceOp op, const Group& group) {
  const char* name = "all_reduce_async";
  KINDLING_CHECK(tensor.defined(),
                 "kindling::dist::all_reduce_async: the tensor is undefined; pass a tensor with data");
  detail::check_bitwise(op, tensor.scalar_type(), name);
  auto g = participant(group, name);
  if (!g) return detail::done_work(name);
  detail::check_in_place_tensor(tensor, name);
  KINDLING_CHECK(tensor.scalar_type() != at::kBool,
                 "kindling::dist::all_reduce_async: bool tensors are not supported; "
                 "reduce a uint8 tensor (or use the blocking all_reduce)");
  at::Tensor t = tensor;
  return Work(
      detail::start_async(g, name, /*collective=*/true, [&](detail::Communicator& c) { return c.all_reduce(t, op); },
                          &t));
}

Work& Work::operator=(Work&& other) noexcept {
  if (this != &other) {
    try {
      if (state_ && !state_->waited) wait();
    } catch (const std::exception& e) {
      log(LogLevel::kError, e.what());
    }
    state_ = std::move(other.state_);
  }
  return *this;
}

Work::~Work() {
  // After a failure (already reported by whoever saw it) pending work is abandoned quietly, and
  // so is work whose group finalize() closed (its engine is gone: waiting would touch freed state).
  if (state_ && !state_->waited && !detail::runtime().broken.load() &&
      (state_->group == nullptr || state_->group->valid)) {
    try {
      wait();
    } catch (const std::exception& e) {
      log(LogLevel::kError,
          std::string("kindling::dist::Work destroyed without wait(); its operation failed: ") + e.what());
    }
  }
}

void Work::wait() {
  KINDLING_CHECK(state_ != nullptr, "kindling::dist::Work::wait: this Work refers to no operation");
  if (state_->waited) return;
  state_->waited = true;
  if (state_->group == nullptr) return;  // complete from the start
  KINDLING_CHECK(state_->group->valid, "kindling::dist::Work::wait: ", state_->name, " (collective #", state_->seq,
                 ") was started before finalize() and waited on after it; wait for it before finalize()");
  try {
    detail::wait_op(*state_->op, *state_->group, state_->name, state_->seq, !state_->collective);
    detail::flight_complete(state_->record);
    detail::timeline_end(state_->timeline);  // an engine that could not say when it completed
    state_->timeline.start_ns = -1;
  } catch (const kindling::Error&) {
    throw;
  } catch (const std::exception& e) {
    detail::translate(e, *state_->group, state_->name, state_->seq);
  }
}

bool Work::is_completed() const { return state_ == nullptr || state_->op->is_completed(); }

int Work::source_rank() const {
  KINDLING_CHECK(state_ != nullptr, "kindling::dist::Work::source_rank: this Work refers to no operation");
  int idx = state_->op->source_rank();
  return idx < 0 ? -1 : state_->group->global_rank(idx);
}

}  // namespace dist
}  // namespace kindling
