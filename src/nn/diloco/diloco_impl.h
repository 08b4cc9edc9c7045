#pragma once
// DiLoCo's state (kindling/nn/diloco.h): the pieces of the model, each with its global weights,
// its outer optimizer and its exchange in flight; the schedule that says when each is exchanged.
#include <ATen/core/Tensor.h>
#include <torch/optim/optimizer.h>

#include <memory>
#include <optional>
#include <vector>

#include "kindling/dist/group.h"
#include "kindling/dist/hierarchy.h"
#include "kindling/nn/diloco.h"

namespace kindling {
namespace nn {
namespace diloco {

// One piece of the model (all of it without streaming).
struct Fragment {
  std::vector<at::Tensor> params;                  // the module's weights: this worker's own
  std::vector<at::Tensor> global;                  // θ_global of each (leaves; .grad() = Δ for the outer step)
  std::unique_ptr<torch::optim::Optimizer> outer;  // over `global`
  int64_t offset = 0;                              // local step, modulo sync_every, that starts its exchange
  bool carries_buffers = false;                    // the last piece averages the floating buffers
  at::Tensor residual;                             // what the cast lost (error_feedback), flat float32

  // The exchange in flight, if any.
  bool pending = false;
  int64_t due = 0;                                 // applied after this inner step
  at::Tensor wire;                                 // Δ / workers in exchange_dtype, summed in place
  at::Tensor buffer_wire;                          // the floating buffers / workers, summed in place
  std::vector<dist::Work> works;
  std::vector<dist::HostHierarchy::Reduction> reductions;
};

}  // namespace diloco

struct DiLoCo::Impl {
  torch::optim::Optimizer* inner = nullptr;
  DiLoCoOptions options;
  std::vector<at::Tensor> buffers;  // the module's floating-point buffers
  std::vector<diloco::Fragment> fragments;
  int64_t steps = 0;
  int64_t syncs = 0;
  int world = 1;                    // divisor of the summed pseudo-gradient
  int rank = 0;
  std::shared_ptr<dist::HostHierarchy> hosts;  // per_host: the exchange between hosts
  std::optional<dist::Group> host_group;       // per_host: this rank's host, for the hook
  std::vector<double> pushed_lr;    // each group's learning rate as last given to `inner`

  // The pieces' exchanges due after the current `steps`: finished ones applied, new ones started.
  void synchronize();
  // θ_global := the module's weights (after the broadcast, at the end of the warm-up).
  void adopt_weights();
  // Starts piece p's exchange of its pseudo-gradient (and buffers), due `delay` steps on.
  void start(diloco::Fragment& f);
  // Waits for piece p's exchange, steps its outer optimizer, gives the worker the new weights.
  void finish(diloco::Fragment& f);
  // Whether the synchronous warm-up is over (after `steps` inner steps).
  bool local() const { return steps >= options.warmup_steps(); }
};

}  // namespace nn
}  // namespace kindling
