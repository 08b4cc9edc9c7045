"""Loads the state a ZeroRedundancyOptimizer consolidated (tests/nn/zero_test.cpp) into Python
torch's own Adam, over parameters shaped as the test's model, and steps it once.

Usage: zero_state_in_python.py STATE_FILE"""
import sys

import torch

# torch >= 2.6 loads with weights_only=True by default, which refuses the type tags that
# LibTorch's pickler writes for dicts and lists; allowing those (harmless) helpers is enough.
if hasattr(torch.serialization, "add_safe_globals"):
    import torch.jit._pickle as tags
    torch.serialization.add_safe_globals([tags.restore_type_tag, tags.build_intlist, tags.build_doublelist,
                                          tags.build_boollist, tags.build_tensorlist])

saved = torch.load(sys.argv[1])
shapes = [(32, 12), (32,), (32, 32), (32,), (4, 32), (4,)]
params = [torch.nn.Parameter(torch.zeros(s)) for s in shapes]
weights = saved["weights"]
at = 0
with torch.no_grad():
    for p in params:
        p.copy_(weights[at:at + p.numel()].view(p.shape))
        at += p.numel()
adam = torch.optim.Adam([{"params": params[:2], "lr": 5e-3}, {"params": params[2:]}], lr=1e-2)
adam.load_state_dict(saved["optimizer"])
for p in params:
    state = adam.state[p]
    assert state["exp_avg"].shape == p.shape and state["exp_avg_sq"].shape == p.shape, (p.shape, state)
for p in params:
    p.grad = torch.ones_like(p)
adam.step()
step = int(adam.state[params[0]]["step"])
print("loaded into torch.optim.Adam: groups=%d states=%d lr=%g,%g step=%d" %
      (len(adam.param_groups), len(adam.state), adam.param_groups[0]["lr"], adam.param_groups[1]["lr"], step))
