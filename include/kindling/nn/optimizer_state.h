#pragma once
/// \file
/// LibTorch optimizers' state in the layout of Python torch's `optimizer.state_dict()`:
/// {"state": {index: {...}}, "param_groups": [{options..., "params": [indices]}]}, the
/// parameters numbered 0, 1, ... across the groups in order. Written with torch::pickle_save it
/// loads into Python's optimizer of the same kind (torch.optim.SGD / Adam / AdamW). Checkpoints
/// (kindling::handlers::stateful) and ZeroRedundancyOptimizer use it. All functions are local.

#include <torch/optim/optimizer.h>

#include "kindling/engine/state_dict.h"
#include "kindling/export.h"

namespace kindling {
namespace nn {

/// Whether every parameter group's options are SGDOptions, AdamOptions or AdamWOptions (the
/// kinds this layout covers). Does not throw.
KINDLING_API bool has_torch_state_layout(const torch::optim::Optimizer& optimizer);

/// The optimizer's options and per-parameter state in torch's layout (see the file comment).
/// Throws kindling::UsageError when has_torch_state_layout is false.
KINDLING_API StateDict optimizer_state_dict(const torch::optim::Optimizer& optimizer);

/// Restores what optimizer_state_dict saved: each group's options, then each parameter's
/// state (a parameter without an entry loses its state). Throws kindling::UsageError, before
/// changing anything, when the layout does not apply, a key is missing, the number of groups
/// or of parameters in a group differs, or a state tensor's shape is not its parameter's.
KINDLING_API void load_optimizer_state_dict(torch::optim::Optimizer& optimizer, const StateDict& state);

/// Any optimizer's state: optimizer_state_dict where has_torch_state_layout, else LibTorch's own
/// archive of it as bytes under the key "torch_archive" (readable by LibTorch only). Throws what
/// LibTorch's archive writer throws.
KINDLING_API StateDict any_optimizer_state_dict(const torch::optim::Optimizer& optimizer);

/// Restores what any_optimizer_state_dict saved. Throws kindling::UsageError, before changing
/// anything, where the state does not fit (see load_optimizer_state_dict; an archive given to
/// SGD/Adam/AdamW, or a malformed archive entry), and what LibTorch's archive reader throws.
KINDLING_API void load_any_optimizer_state_dict(torch::optim::Optimizer& optimizer, const StateDict& state);

/// An optimizer whose state lives outside LibTorch's Optimizer::state() (ZeroRedundancyOptimizer
/// keeps 1/N of it on each rank, OptimizerInBackward one inner optimizer per DDP bucket): it
/// gives and takes its whole state in torch's layout itself. kindling::handlers::stateful
/// saves such an optimizer through these.
class KINDLING_API SelfStatedOptimizer {
 public:
  virtual ~SelfStatedOptimizer();
  /// The whole state in torch's layout (see the implementation for who must call it).
  virtual StateDict state_dict() const = 0;
  /// Restores a state_dict() (or an ordinary optimizer's optimizer_state_dict).
  virtual void load_state_dict(const StateDict& state) = 0;
};

}  // namespace nn
}  // namespace kindling
