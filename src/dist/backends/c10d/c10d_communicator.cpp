#include "dist/backends/c10d/c10d_communicator.h"

#include <functional>

#include "dist/backends/c10d/c10d_compat.h"
#include "kindling/error.h"

namespace kindling {
namespace dist {
namespace detail {
namespace {

c10d::ReduceOp to_c10d(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return c10d::ReduceOp::SUM;
    case ReduceOp::kProduct: return c10d::ReduceOp::PRODUCT;
    case ReduceOp::kMin: return c10d::ReduceOp::MIN;
    case ReduceOp::kMax: return c10d::ReduceOp::MAX;
    case ReduceOp::kAnd: return c10d::ReduceOp::BAND;
    case ReduceOp::kOr: return c10d::ReduceOp::BOR;
  }
  KINDLING_INTERNAL_ASSERT(false, "unknown ReduceOp");
  return c10d::ReduceOp::SUM;
}

// Gloo has no kernels for int16, bfloat16 and bool, and cannot broadcast complex tensors.
bool gloo_lacks(at::ScalarType t) {
  return t == at::kShort || t == at::kBFloat16 || t == at::kBool || at::isComplexType(t);
}

// For operations that only move bytes: the same memory seen as a dtype Gloo has, with the
// same element size (a view: results land in the original tensor).
at::Tensor as_movable(const at::Tensor& t, bool gloo) {
  if (!gloo || !gloo_lacks(t.scalar_type())) return t;
  switch (t.element_size()) {
    case 1: return t.reshape({-1}).view(at::kByte);
    case 2: return t.reshape({-1}).view(at::kHalf);
    default: return t.reshape({-1}).view(at::kLong);  // complex64 (2 x 4 bytes), complex128 (2 x 8 bytes)
  }
}

// For reductions: a copy in a dtype Gloo reduces (int16 -> int32, bfloat16 -> float32,
// bool -> uint8), copied back when the operation completes. Complex sums stay as they are.
at::ScalarType reducible(at::ScalarType t) {
  switch (t) {
    case at::kShort: return at::kInt;
    case at::kBFloat16: return at::kFloat;
    case at::kBool: return at::kByte;
    default: return t;
  }
}

// The tensor a reduction runs on: `t` itself, or a widened copy that `copy_back` writes
// into `t` once the operation completes.
at::Tensor reducible_form(const at::Tensor& t, bool gloo, std::function<void()>& copy_back) {
  const auto as = gloo ? reducible(t.scalar_type()) : t.scalar_type();
  if (as == t.scalar_type()) return t;
  at::Tensor wide = t.to(as);
  copy_back = [dst = t, wide]() mutable { dst.copy_(wide); };
  return wide;
}

// c10d raises a plain c10::Error both when gloo or NCCL's watchdog gave up waiting and when
// a peer failed (LibTorch 1.13 has no timeout type; 2.x's DistError subtypes do not single
// out timeouts): their messages are the only signal ("Timed out waiting 1000ms for recv",
// "Watchdog caught collective operation timeout").
bool says_timed_out(const std::string& said) {
  return said.find("imed out") != std::string::npos || said.find("imeout") != std::string::npos;
}

// Holds the c10d work and keeps the tensor lists it references alive until it is done.
class C10dOp : public PendingOp {
 public:
  C10dOp(c10::intrusive_ptr<c10d::Work> work, std::vector<at::Tensor> keep = {},
         std::vector<std::vector<at::Tensor>> keep_lists = {}, std::function<void()> on_done = {})
      : work_(std::move(work)),
        keep_(std::move(keep)),
        keep_lists_(std::move(keep_lists)),
        on_done_(std::move(on_done)) {}
  void wait(std::chrono::milliseconds timeout) override {
    try {
      work_->wait(timeout);
    } catch (const std::exception& e) {
      const std::string said = engine_message(e);
      if (says_timed_out(said)) throw EngineTimeout(said);
      throw;
    }
    if (on_done_) {
      on_done_();
      on_done_ = nullptr;
    }
  }
  bool is_completed() override { return work_->isCompleted(); }
  int source_rank() override {
    try {
      return work_->sourceRank();
    } catch (const std::exception&) {
      return -1;
    }
  }

 private:
  c10::intrusive_ptr<c10d::Work> work_;
  std::vector<at::Tensor> keep_;
  std::vector<std::vector<at::Tensor>> keep_lists_;
  std::function<void()> on_done_;
};

OpPtr wrap(c10::intrusive_ptr<c10d::Work> work, std::vector<at::Tensor> keep = {},
           std::vector<std::vector<at::Tensor>> keep_lists = {}, std::function<void()> on_done = {}) {
  return std::make_unique<C10dOp>(std::move(work), std::move(keep), std::move(keep_lists), std::move(on_done));
}

std::vector<at::Tensor> movable(const std::vector<at::Tensor>& ts, bool gloo) {
  std::vector<at::Tensor> out;
  out.reserve(ts.size());
  for (const auto& t : ts) out.push_back(as_movable(t, gloo));
  return out;
}

}  // namespace

C10dCommunicator::~C10dCommunicator() {
  if (!owned_) return;
  try {
    shutdown_process_group(*pg_);
  } catch (const std::exception&) {
    // Nothing useful to do while tearing down; the engine reported its own problem earlier.
  }
}

C10dCommunicator::C10dCommunicator(c10::intrusive_ptr<c10d::ProcessGroup> pg, bool owned)
    : pg_(std::move(pg)), owned_(owned) {
  try {
    gloo_ = pg_->getBackendName() == "gloo";
  } catch (const std::exception&) {
    gloo_ = false;  // a process group that does not say its name
  }
}

OpPtr C10dCommunicator::all_reduce(at::Tensor& tensor, ReduceOp op) {
  std::function<void()> back;
  std::vector<at::Tensor> tensors{reducible_form(tensor, gloo_, back)};
  c10d::AllreduceOptions opts;
  opts.reduceOp = to_c10d(op);
  auto work = pg_->allreduce(tensors, opts);
  return wrap(std::move(work), std::move(tensors), {}, std::move(back));
}

OpPtr C10dCommunicator::broadcast(at::Tensor& tensor, int root) {
  std::vector<at::Tensor> tensors{as_movable(tensor, gloo_)};
  c10d::BroadcastOptions opts;
  opts.rootRank = root;
  auto work = pg_->broadcast(tensors, opts);
  return wrap(std::move(work), std::move(tensors));
}

OpPtr C10dCommunicator::all_gather(std::vector<at::Tensor>& outputs, at::Tensor& input) {
  std::vector<std::vector<at::Tensor>> outs{movable(outputs, gloo_)};
  std::vector<at::Tensor> ins{as_movable(input, gloo_)};
  auto work = pg_->allgather(outs, ins);
  return wrap(std::move(work), std::move(ins), std::move(outs));
}

OpPtr C10dCommunicator::reduce(at::Tensor& tensor, int root, ReduceOp op) {
  std::function<void()> back;
  std::vector<at::Tensor> tensors{reducible_form(tensor, gloo_, back)};
  c10d::ReduceOptions opts;
  opts.rootRank = root;
  opts.reduceOp = to_c10d(op);
  auto work = pg_->reduce(tensors, opts);
  return wrap(std::move(work), std::move(tensors), {}, std::move(back));
}

OpPtr C10dCommunicator::gather(std::vector<at::Tensor>& outputs, at::Tensor& input, int root) {
  std::vector<std::vector<at::Tensor>> outs;
  if (!outputs.empty()) outs.push_back(movable(outputs, gloo_));
  std::vector<at::Tensor> ins{as_movable(input, gloo_)};
  c10d::GatherOptions opts;
  opts.rootRank = root;
  auto work = pg_->gather(outs, ins, opts);
  return wrap(std::move(work), std::move(ins), std::move(outs));
}

OpPtr C10dCommunicator::scatter(at::Tensor& output, std::vector<at::Tensor>& inputs, int root) {
  std::vector<at::Tensor> outs{as_movable(output, gloo_)};
  std::vector<std::vector<at::Tensor>> ins;
  if (!inputs.empty()) ins.push_back(movable(inputs, gloo_));
  c10d::ScatterOptions opts;
  opts.rootRank = root;
  auto work = pg_->scatter(outs, ins, opts);
  return wrap(std::move(work), std::move(outs), std::move(ins));
}

OpPtr C10dCommunicator::all_to_all(at::Tensor& output, at::Tensor& input, std::vector<int64_t> output_splits,
                                   std::vector<int64_t> input_splits) {
  at::Tensor out = output, in = input;
  if (gloo_ && gloo_lacks(input.scalar_type())) {
    // Splits count elements along dim 0 of these 1-D tensors; the byte view must keep that.
    out = as_movable(output, true);
    in = as_movable(input, true);
    const int64_t k = static_cast<int64_t>(input.element_size() / in.element_size());
    for (auto& v : output_splits) v *= k;
    for (auto& v : input_splits) v *= k;
  }
  auto work = pg_->alltoall_base(out, in, output_splits, input_splits);
  return wrap(std::move(work), {out, in});
}

OpPtr C10dCommunicator::barrier() { return wrap(pg_->barrier()); }

OpPtr C10dCommunicator::send(at::Tensor& tensor, int dst, int tag) {
  std::vector<at::Tensor> tensors{as_movable(tensor, gloo_)};
  auto work = pg_->send(tensors, dst, tag);
  return wrap(std::move(work), std::move(tensors));
}

OpPtr C10dCommunicator::recv(at::Tensor& tensor, int src, int tag) {
  std::vector<at::Tensor> tensors{as_movable(tensor, gloo_)};
  auto work = src < 0 ? pg_->recvAnysource(tensors, tag) : pg_->recv(tensors, src, tag);
  return wrap(std::move(work), std::move(tensors));
}

}  // namespace detail
}  // namespace dist
}  // namespace kindling
