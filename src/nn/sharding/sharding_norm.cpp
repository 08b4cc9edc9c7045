// Gradient clipping by the global norm on a sharded model (kindling/nn/sharding.h): each rank
// sums its shards' part of the norm, one all_reduce adds (or, for infinity, takes the largest of)
// the ranks' parts, and every rank scales its shards by the same factor.
#include <torch/csrc/autograd/grad_mode.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "kindling/dist/dist.h"
#include "kindling/error.h"
#include "nn/sharding/sharding_state.h"

namespace kindling {
namespace nn {

namespace {

void check_clip(double max_norm, double norm_type) {
  KINDLING_CHECK(max_norm >= 0, detail::kShardingWho, "::clip_grad_norm: max_norm must be >= 0, got ", max_norm);
  KINDLING_CHECK(norm_type > 0, detail::kShardingWho, "::clip_grad_norm: norm_type must be > 0 (or infinity), got ",
                 norm_type);
}

// This process's part: the sum of |g|^p over `params`' gradients, or for p = infinity the largest |g|.
double local_part(const std::vector<at::Tensor>& params, double p) {
  const bool inf = std::isinf(p);
  double part = 0;
  for (const auto& param : params) {
    const at::Tensor& g = param.grad();
    if (!g.defined() || g.numel() == 0) continue;
    const double n = g.detach().norm(p).item<double>();
    part = inf ? std::max(part, n) : part + std::pow(n, p);
  }
  return part;
}

double scale_by(const std::vector<at::Tensor>& params, double total, double max_norm) {
  const double coefficient = max_norm / (total + 1e-6);  // torch's clip_grad_norm_ rule
  if (coefficient < 1) {
    at::NoGradGuard no_grad;
    for (const auto& param : params)
      if (param.grad().defined()) param.grad().mul_(coefficient);
  }
  return total;
}

}  // namespace

double ShardedModel::clip_local_grad_norm(const std::vector<at::Tensor>& params, double max_norm, double norm_type) {
  check_clip(max_norm, norm_type);
  const double part = local_part(params, norm_type);
  return scale_by(params, std::isinf(norm_type) ? part : std::pow(part, 1.0 / norm_type), max_norm);
}

double ShardedModel::clip_grad_norm(double max_norm, double norm_type) {
  check_clip(max_norm, norm_type);
  KINDLING_CHECK(!state_->stepper, detail::kShardingWho, "::clip_grad_norm: the optimizer steps inside backward "
                 "(step_in_backward), before any gradient could be clipped; call step_in_backward(nullptr) to clip "
                 "between backward and step()");
  const auto shards = parameters();
  const bool inf = std::isinf(norm_type);
  const double part = local_part(shards, norm_type);
  const double all = dist::all_reduce(part, inf ? dist::ReduceOp::kMax : dist::ReduceOp::kSum, state_->options.group());
  return scale_by(shards, inf ? all : std::pow(all, 1.0 / norm_type), max_norm);
}

}  // namespace nn
}  // namespace kindling
