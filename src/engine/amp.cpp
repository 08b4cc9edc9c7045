// Autocast scope and GradScaler (dynamic loss scaling) on plain ATen operations, so that
// they work on CPU and CUDA and with LibTorch 1.13 and 2.x alike.
#include "kindling/engine/amp.h"

#include <ATen/autocast_mode.h>

#include <vector>

#include "kindling/detail/torch_compat.h"
#include "kindling/dist/dist.h"
#include "kindling/error.h"
#include "kindling/nn/optimizer_in_backward.h"
#include "kindling/nn/sharding.h"
#include "kindling/nn/zero.h"

namespace kindling {
namespace engine {
namespace {

bool autocast_enabled(c10::DeviceType t) {
#if KINDLING_TORCH_AUTOCAST_BY_DEVICE_TYPE
  return at::autocast::is_autocast_enabled(t);
#else
  return t == c10::kCUDA ? at::autocast::is_enabled() : at::autocast::is_cpu_enabled();
#endif
}

void set_autocast(c10::DeviceType t, bool on) {
#if KINDLING_TORCH_AUTOCAST_BY_DEVICE_TYPE
  at::autocast::set_autocast_enabled(t, on);
#else
  if (t == c10::kCUDA) {
    at::autocast::set_enabled(on);
  } else {
    at::autocast::set_cpu_enabled(on);
  }
#endif
}

at::ScalarType autocast_dtype(c10::DeviceType t) {
#if KINDLING_TORCH_AUTOCAST_BY_DEVICE_TYPE
  return at::autocast::get_autocast_dtype(t);
#else
  return t == c10::kCUDA ? at::autocast::get_autocast_gpu_dtype() : at::autocast::get_autocast_cpu_dtype();
#endif
}

void set_autocast_dtype(c10::DeviceType t, at::ScalarType dtype) {
#if KINDLING_TORCH_AUTOCAST_BY_DEVICE_TYPE
  at::autocast::set_autocast_dtype(t, dtype);
#else
  if (t == c10::kCUDA) {
    at::autocast::set_autocast_gpu_dtype(dtype);
  } else {
    at::autocast::set_autocast_cpu_dtype(dtype);
  }
#endif
}

}  // namespace

Autocast::Autocast(c10::DeviceType device_type, std::optional<at::ScalarType> dtype, bool enabled)
    : device_type_(device_type), enabled_(enabled) {
  KINDLING_CHECK(device_type == c10::kCPU || device_type == c10::kCUDA, "kindling::engine::Autocast: device type ",
                 c10::DeviceTypeName(device_type), " is not supported; use CPU (bfloat16) or CUDA (float16)");
  if (!enabled_) return;
  previous_enabled_ = autocast_enabled(device_type_);
  previous_dtype_ = autocast_dtype(device_type_);
  set_autocast_dtype(device_type_, dtype.value_or(device_type_ == c10::kCUDA ? at::kHalf : at::kBFloat16));
  set_autocast(device_type_, true);
  at::autocast::increment_nesting();
}

Autocast::~Autocast() {
  if (!enabled_) return;
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  set_autocast(device_type_, previous_enabled_);
  set_autocast_dtype(device_type_, previous_dtype_);
}

GradScaler::GradScaler(GradScalerOptions options)
    : options_(options), enabled_(options.enabled()), scale_(options.init_scale()) {
  KINDLING_CHECK(options_.init_scale() > 0, "kindling::engine::GradScaler: init_scale must be positive, got ",
                 options_.init_scale());
  KINDLING_CHECK(options_.growth_factor() > 1.0, "kindling::engine::GradScaler: growth_factor must be above 1, got ",
                 options_.growth_factor());
  KINDLING_CHECK(options_.backoff_factor() > 0.0 && options_.backoff_factor() < 1.0,
                 "kindling::engine::GradScaler: backoff_factor must be in (0, 1), got ", options_.backoff_factor());
  KINDLING_CHECK(options_.growth_interval() >= 1,
                 "kindling::engine::GradScaler: growth_interval must be at least 1, "
                 "got ",
                 options_.growth_interval());
}

at::Tensor GradScaler::scale(const at::Tensor& loss) const {
  if (!enabled_) return loss;
  return loss.to(at::kFloat) * scale_;
}

void GradScaler::unscale_(torch::optim::Optimizer& optimizer) {
  if (!enabled_) return;
  KINDLING_CHECK(unscaled_.count(&optimizer) == 0,
                 "kindling::engine::GradScaler::unscale_: already called for this "
                 "optimizer since the last update(); call it once per step");
  KINDLING_CHECK(dynamic_cast<nn::OptimizerInBackward*>(&optimizer) == nullptr,
                 "kindling::engine::GradScaler: the optimizer is a kindling::nn::OptimizerInBackward, which steps "
                 "inside backward, before gradients could be unscaled or checked for inf/NaN; use the ordinary "
                 "optimizer with AMP's loss scaling");
  // ZeRO: only this rank's parts hold the group's average, and every rank must decide alike.
  auto* zero = dynamic_cast<nn::ZeroRedundancyOptimizer*>(&optimizer);
  KINDLING_CHECK(zero == nullptr || !zero->zero_options().overlap_with_ddp(),
                 "kindling::engine::GradScaler: the optimizer is a kindling::nn::ZeroRedundancyOptimizer made with "
                 "ZeroOptions::overlap_with_ddp, which steps inside backward, before gradients could be unscaled "
                 "or checked for inf/NaN; make it without overlap_with_ddp to use AMP's loss scaling");
  // A sharded model's shards: each rank holds a part of the gradients; the ranks decide together.
  const nn::ShardedModel* sharded = nullptr;
  for (const auto& group : optimizer.param_groups()) {
    for (const auto& p : group.params())
      if ((sharded = nn::detail::shard_owner(p)) != nullptr) break;
    if (sharded) break;
  }
  KINDLING_CHECK(sharded == nullptr || sharded->stepping_in_backward() == nullptr,
                 "kindling::engine::GradScaler: the optimizer steps inside the sharded model's backward "
                 "(step_in_backward), before gradients could be unscaled or checked for inf/NaN; turn it off "
                 "(model.sharded()->step_in_backward(nullptr)) to use AMP's loss scaling");
  const double inverse = 1.0 / scale_;
  at::NoGradGuard no_grad;
  std::vector<at::Tensor> gradients;
  for (auto& group : optimizer.param_groups()) {
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      p.mutable_grad().mul_(inverse);
      gradients.push_back(p.grad());
    }
  }
  if (zero) gradients = zero->local_gradients();
  at::Tensor bad;  // accumulated on the gradients' device: one host sync per step, not per tensor
  for (const auto& g : gradients) {
    at::Tensor nonfinite = at::logical_not(at::isfinite(g)).any();
    bad = bad.defined() ? at::logical_or(bad, nonfinite.to(bad.device())) : nonfinite;
  }
  bool found = bad.defined() && bad.item<bool>();
  if (zero) found = dist::all_reduce(static_cast<int64_t>(found), dist::ReduceOp::kMax, zero->group()) != 0;
  if (sharded) found = dist::all_reduce(static_cast<int64_t>(found), dist::ReduceOp::kMax, sharded->group()) != 0;
  unscaled_[&optimizer] = found;
}

bool GradScaler::step(torch::optim::Optimizer& optimizer) {
  if (!enabled_) {
    optimizer.step();
    return true;
  }
  if (unscaled_.count(&optimizer) == 0) unscale_(optimizer);
  if (unscaled_[&optimizer]) return false;
  optimizer.step();
  return true;
}

void GradScaler::update() {
  if (!enabled_) return;
  bool found = false;
  for (const auto& kv : unscaled_) found = found || kv.second;
  unscaled_.clear();
  if (found) {
    scale_ *= options_.backoff_factor();
    growth_tracker_ = 0;
  } else if (++growth_tracker_ >= options_.growth_interval()) {
    scale_ *= options_.growth_factor();
    growth_tracker_ = 0;
  }
}

StateDict GradScaler::state_dict() const {
  StateDict sd = new_state_dict();
  if (!enabled_) return sd;
  sd.insert("scale", scale_);
  sd.insert("growth_factor", options_.growth_factor());
  sd.insert("backoff_factor", options_.backoff_factor());
  sd.insert("growth_interval", options_.growth_interval());
  sd.insert("_growth_tracker", growth_tracker_);
  return sd;
}

void GradScaler::load_state_dict(const StateDict& state) {
  if (!enabled_) return;
  for (const char* key : {"scale", "growth_factor", "backoff_factor", "growth_interval", "_growth_tracker"}) {
    KINDLING_CHECK(state.contains(key), "kindling::engine::GradScaler::load_state_dict: missing key '", key,
                   "' (an empty state comes from a disabled scaler)");
  }
  scale_ = state.at("scale").toDouble();
  options_.growth_factor(state.at("growth_factor").toDouble()).backoff_factor(state.at("backoff_factor").toDouble());
  options_.growth_interval(state.at("growth_interval").toInt());
  growth_tracker_ = state.at("_growth_tracker").toInt();
}

}  // namespace engine
}  // namespace kindling
