// DiLoCo's synchronisations (kindling/nn/diloco.h): when each piece is exchanged, its
// pseudo-gradient averaged over the workers, the outer step and the new weights given back.
#include <ATen/ATen.h>

#include <utility>

#include "diloco_impl.h"
#include "kindling/dist/dist.h"

namespace kindling {
namespace nn {

namespace {

// The tensors laid end to end, as float32.
at::Tensor flat(const std::vector<at::Tensor>& tensors) {
  std::vector<at::Tensor> parts;
  parts.reserve(tensors.size());
  for (const auto& t : tensors) parts.push_back(t.detach().reshape(-1).to(at::kFloat));
  return at::cat(parts);
}

// `from` (flat) cut into views shaped as `like`.
std::vector<at::Tensor> unflat(const at::Tensor& from, const std::vector<at::Tensor>& like) {
  std::vector<at::Tensor> out;
  int64_t at = 0;
  for (const auto& t : like) {
    out.push_back(from.narrow(0, at, t.numel()).view(t.sizes()));
    at += t.numel();
  }
  return out;
}

}  // namespace

void DiLoCo::Impl::adopt_weights() {
  at::NoGradGuard no_grad;
  for (auto& f : fragments)
    for (std::size_t i = 0; i < f.params.size(); ++i) f.global[i].copy_(f.params[i]);
}

void DiLoCo::Impl::synchronize() {
  const int64_t warmup = options.warmup_steps();
  if (steps <= warmup) {
    if (steps == warmup) adopt_weights();  // the ranks' weights agree until here
    return;
  }
  const int64_t local_step = steps - warmup;
  for (auto& f : fragments)
    if (f.pending && f.due == steps) finish(f);
  for (auto& f : fragments) {
    if (local_step % options.sync_every() != f.offset) continue;
    start(f);
    if (options.fragment_sync_delay() == 0) finish(f);
  }
}

void DiLoCo::Impl::start(diloco::Fragment& f) {
  at::NoGradGuard no_grad;
  at::Tensor delta = flat(f.global) - flat(f.params);
  if (options.error_feedback() && f.residual.defined()) delta.add_(f.residual);
  // Divided before the sum, as DDP's 16-bit hooks do: a sum of halves cannot overflow.
  f.wire = (delta / world).to(options.exchange_dtype()).contiguous();
  if (options.error_feedback()) f.residual = delta - f.wire.to(at::kFloat) * world;
  f.works.clear();
  f.reductions.clear();
  const auto launch = [&](const at::Tensor& t) {
    if (hosts) {
      f.reductions.push_back(hosts->all_reduce_async(t));
    } else {
      f.works.push_back(dist::all_reduce_async(t));
    }
  };
  launch(f.wire);
  if (f.carries_buffers) {
    f.buffer_wire = (flat(buffers) / world).contiguous();
    launch(f.buffer_wire);
  }
  f.pending = true;
  f.due = steps + options.fragment_sync_delay();
}

void DiLoCo::Impl::finish(diloco::Fragment& f) {
  for (auto& w : f.works) w.wait();
  for (auto& r : f.reductions) r.wait();
  f.works.clear();
  f.reductions.clear();
  f.pending = false;
  const std::vector<at::Tensor> average = unflat(f.wire.to(at::kFloat), f.global);
  {
    at::NoGradGuard no_grad;
    for (std::size_t i = 0; i < f.global.size(); ++i) f.global[i].mutable_grad() = average[i].to(f.global[i].dtype());
  }
  f.outer->step();
  at::NoGradGuard no_grad;
  const double alpha = options.fragment_update_alpha();
  for (std::size_t i = 0; i < f.params.size(); ++i) {
    f.global[i].mutable_grad() = at::Tensor();
    if (alpha == 0) {
      f.params[i].copy_(f.global[i]);
    } else {
      f.params[i].mul_(alpha).add_(f.global[i], 1 - alpha);
    }
  }
  if (f.carries_buffers) {
    const std::vector<at::Tensor> mean = unflat(f.buffer_wire, buffers);
    for (std::size_t i = 0; i < buffers.size(); ++i) buffers[i].copy_(mean[i]);
  }
  f.wire = at::Tensor();
  f.buffer_wire = at::Tensor();
  ++syncs;
}

}  // namespace nn
}  // namespace kindling
