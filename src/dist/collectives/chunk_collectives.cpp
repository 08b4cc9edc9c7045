// reduce_scatter and all_gather_into (kindling/dist/dist.h), blocking and asynchronous: each
// member's chunk of one flat tensor, through call.h's spine like every other collective, on the
// group's Communicator (its point-to-point default, src/dist/exchange.cpp, or the engine's own).
#include <ATen/ATen.h>

#include "dist/collectives/call.h"

namespace kindling {
namespace dist {
namespace {

using detail::participant;

// The tensors of collective `name` over `size` ranks: `whole` (reduce_scatter's input,
// all_gather_into's output) must hold `size` chunks of `part`'s length, in `part`'s dtype.
void check_chunks(const char* name, const at::Tensor& whole, const char* whole_name, const at::Tensor& part,
                  const char* part_name, int64_t size) {
  KINDLING_CHECK(whole.defined() && part.defined(), "kindling::dist::", name, ": the ",
                 whole.defined() ? part_name : whole_name, " tensor is undefined; pass tensors with data");
  KINDLING_CHECK(whole.scalar_type() == part.scalar_type(), "kindling::dist::", name, ": the ", whole_name, " is ",
                 c10::toString(whole.scalar_type()), " but the ", part_name, " is ", c10::toString(part.scalar_type()),
                 "; give both one dtype");
  KINDLING_CHECK(whole.numel() == size * part.numel(), "kindling::dist::", name, ": the ", whole_name, " has ",
                 whole.numel(), " elements (shape ", whole.sizes(), ") but the ", part_name, " has ", part.numel(),
                 " (shape ", part.sizes(), ") and the group ", size, " ranks: the ", whole_name, " must hold ", size,
                 " x ", part.numel(), " = ", size * part.numel(), " elements, one chunk of the ", part_name,
                 "'s length per member");
}

// The group's state when this rank takes part; null otherwise, after the checks and the serial
// model's copy of `input` into `output` (a rank outside the group keeps its output).
std::shared_ptr<detail::GroupState> members_or_copy(const char* name, const at::Tensor& output, const at::Tensor& input,
                                                    bool scatters, const Group& group) {
  auto g = detail::resolve(group, name);  // null in the serial model
  const int64_t size = g ? static_cast<int64_t>(g->ranks.size()) : 1;
  if (scatters) {
    check_chunks(name, input, "input", output, "output", size);
  } else {
    check_chunks(name, output, "output", input, "input", size);
  }
  if (!g) output.copy_(input.reshape(output.sizes()));
  return participant(group, name);
}

// The tensor as the engine takes it: 1-D, contiguous, on device().
at::Tensor flat(const detail::Staged& s) { return s.work.view({-1}); }

// The start of reduce_scatter (`scatters`) or all_gather_into on flat tensors.
auto starter(at::Tensor& out, at::Tensor& in, ReduceOp op, bool scatters, const detail::GroupState& g) {
  const detail::ExchangeSlot base{g.group_rank, static_cast<int>(g.ranks.size()), 0, g.timeout};
  return [&out, &in, op, scatters, base](detail::Communicator& c, int64_t seq) {
    detail::ExchangeSlot slot = base;
    slot.seq = seq;
    return scatters ? c.reduce_scatter(out, in, op, slot) : c.all_gather_into(out, in, slot);
  };
}

at::Tensor run_blocking(const char* name, const at::Tensor& output, const at::Tensor& input, ReduceOp op, bool scatters,
                        const Group& group) {
  auto g = members_or_copy(name, output, input, scatters, group);
  if (!g) return output;
  auto in_staged = detail::stage(input, name, "input");
  auto out_staged = detail::stage(output, name, "output");
  at::Tensor in = flat(in_staged), out = flat(out_staged);
  detail::run(*g, name, starter(out, in, op, scatters, *g), false, &in);
  if (out_staged.copy_back) output.copy_(out_staged.work);
  return output;
}

Work run_async(const char* name, const at::Tensor& output, const at::Tensor& input, ReduceOp op, bool scatters,
               const Group& group) {
  auto g = members_or_copy(name, output, input, scatters, group);
  if (!g) return detail::done_work(name);
  detail::check_in_place_tensor(output, name);
  detail::check_in_place_tensor(input, name);
  at::Tensor in = input.view({-1}), out = output.view({-1});
  return Work(detail::start_async(g, name, /*collective=*/true, starter(out, in, op, scatters, *g), &in));
}

}  // namespace

at::Tensor reduce_scatter(const at::Tensor& output, const at::Tensor& input, ReduceOp op, const Group& group) {
  if (input.defined()) detail::check_bitwise(op, input.scalar_type(), "reduce_scatter");
  return run_blocking("reduce_scatter", output, input, op, true, group);
}

at::Tensor all_gather_into(const at::Tensor& output, const at::Tensor& input, const Group& group) {
  return run_blocking("all_gather_into", output, input, ReduceOp::kSum, false, group);
}

Work reduce_scatter_async(const at::Tensor& output, const at::Tensor& input, ReduceOp op, const Group& group) {
  if (input.defined()) detail::check_bitwise(op, input.scalar_type(), "reduce_scatter_async");
  return run_async("reduce_scatter_async", output, input, op, true, group);
}

Work all_gather_into_async(const at::Tensor& output, const at::Tensor& input, const Group& group) {
  return run_async("all_gather_into_async", output, input, ReduceOp::kSum, false, group);
}

}  // namespace dist
}  // namespace kindling
