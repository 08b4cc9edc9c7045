#pragma once
/// \file
/// Automatic mixed precision: an autocast scope and a GradScaler with dynamic loss scaling
/// (torch.amp's), used by create_supervised_trainer's amp / scaler options or by hand:
///
/// \code
///   kindling::engine::GradScaler scaler;
///   {
///     kindling::engine::Autocast autocast(c10::kCUDA);   // float16 on CUDA, bfloat16 on CPU
///     loss = loss_fn(model->forward(x), y);
///   }
///   scaler.scale(loss).backward();
///   scaler.step(optimizer);   // skipped when a gradient is inf/NaN
///   scaler.update();          // backs the scale off after a skip, grows it after growth_interval good steps
/// \endcode
///
/// Local: nothing here communicates. With DDP the gradients (and so inf/NaN) are the same on
/// every rank after the backward's all-reduce, so every rank skips the same steps.

#include <ATen/ATen.h>
#include <torch/optim/optimizer.h>

#include <map>
#include <optional>

#include "kindling/engine/state_dict.h"
#include "kindling/export.h"
#include "kindling/options.h"

namespace kindling {
namespace engine {

/// Autocast for `device_type` while the object lives (operations run in `dtype`: float16 on
/// CUDA, bfloat16 on CPU by default); the previous setting comes back at its end. A disabled
/// scope changes nothing. Throws kindling::UsageError for a device type other than CPU or CUDA.
class KINDLING_API Autocast {
 public:
  explicit Autocast(c10::DeviceType device_type, std::optional<at::ScalarType> dtype = std::nullopt,
                    bool enabled = true);
  ~Autocast();
  Autocast(const Autocast&) = delete;
  Autocast& operator=(const Autocast&) = delete;

 private:
  c10::DeviceType device_type_;
  bool enabled_;
  bool previous_enabled_ = false;
  at::ScalarType previous_dtype_ = at::kFloat;
};

/// Options of GradScaler (chain the setters): torch.amp.GradScaler's arguments.
struct KINDLING_API GradScalerOptions {
  /// The first loss scale (default 2^16).
  KINDLING_ARG(double, init_scale) = 65536.0;

  /// Factor of the scale after growth_interval steps without inf/NaN gradients (default 2).
  KINDLING_ARG(double, growth_factor) = 2.0;

  /// Factor of the scale after a step with inf/NaN gradients (default 0.5).
  KINDLING_ARG(double, backoff_factor) = 0.5;

  /// Steps without inf/NaN gradients before the scale grows (default 2000).
  KINDLING_ARG(int64_t, growth_interval) = 2000;

  /// false: scale() and step() pass through unchanged (default true).
  KINDLING_ARG(bool, enabled) = true;
};

/// Dynamic loss scaling: multiply the loss before backward, divide the gradients before the
/// step, skip steps whose gradients overflowed and adapt the scale.
class KINDLING_API GradScaler {
 public:
  /// Throws kindling::UsageError for init_scale <= 0, growth_factor <= 1, backoff_factor
  /// outside (0, 1) or growth_interval < 1.
  explicit GradScaler(GradScalerOptions options = GradScalerOptions());
  /// loss * scale (the loss itself when disabled).
  at::Tensor scale(const at::Tensor& loss) const;
  /// Divides the optimizer's gradients by the scale and notes whether any is inf/NaN. Once
  /// per optimizer between updates; throws kindling::UsageError when called twice. For an
  /// optimizer whose gradients lie in parts across ranks (ZeroRedundancyOptimizer; one built on
  /// a sharded model's parameters(), kindling/nn/sharding.h) the ranks decide together (one
  /// all_reduce over the group: every rank of it calls it); throws kindling::UsageError for such
  /// an optimizer stepping inside backward (overlap_with_ddp, step_in_backward).
  void unscale_(torch::optim::Optimizer& optimizer);
  /// Unscales (if not done) and steps unless a gradient was inf/NaN. Returns whether it stepped.
  bool step(torch::optim::Optimizer& optimizer);
  /// Backs off after a skipped step, grows after growth_interval steps in a row without one.
  void update();
  double get_scale() const { return enabled_ ? scale_ : 1.0; }
  bool is_enabled() const { return enabled_; }
  /// {"scale", "growth_factor", "backoff_factor", "growth_interval", "_growth_tracker"} (torch's keys).
  StateDict state_dict() const;
  /// Throws kindling::UsageError when a key is missing.
  void load_state_dict(const StateDict& state);

 private:
  GradScalerOptions options_;
  bool enabled_;
  double scale_;
  int64_t growth_tracker_ = 0;
  std::map<const torch::optim::Optimizer*, bool> unscaled_;  // optimizer -> found inf/NaN
};

}  // namespace engine
}  // namespace kindling
