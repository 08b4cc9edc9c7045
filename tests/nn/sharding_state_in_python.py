"""Loads what a sharded model saved whole (tests/nn/sharding_checkpoint_test.cpp) into Python
torch's own module and Adam, with the names and parameter groups of the test's model, and steps
the optimizer once.

Usage: sharding_state_in_python.py STATE_FILE"""
import sys

import torch

# torch >= 2.6 loads with weights_only=True by default, which refuses the type tags that
# LibTorch's pickler writes for dicts and lists; allowing those (harmless) helpers is enough.
if hasattr(torch.serialization, "add_safe_globals"):
    import torch.jit._pickle as tags
    torch.serialization.add_safe_globals([tags.restore_type_tag, tags.build_intlist, tags.build_doublelist,
                                          tags.build_boollist, tags.build_tensorlist])


class Block(torch.nn.Module):
    def __init__(self, n_in, n_out):
        super().__init__()
        self.fc = torch.nn.Linear(n_in, n_out)


class UnitNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.b1, self.b2, self.head = Block(12, 32), Block(32, 31), torch.nn.Linear(31, 4)


saved = torch.load(sys.argv[1])
net = UnitNet()
net.load_state_dict(saved["model"])  # strict: every name and shape as torch's own model has them
named = list(net.named_parameters())
weights = [p for n, p in named if "weight" in n]
rest = [p for n, p in named if "weight" not in n]
adam = torch.optim.Adam([{"params": weights, "lr": 5e-3}, {"params": rest}], lr=1e-2)
adam.load_state_dict(saved["optimizer"])
for p in net.parameters():
    state = adam.state[p]
    assert state["exp_avg"].shape == p.shape and state["exp_avg_sq"].shape == p.shape, (p.shape, state)
for p in net.parameters():
    p.grad = torch.ones_like(p)
adam.step()
print("loaded into torch: parameters=%d states=%d step=%d" % (len(named), len(adam.state),
                                                               int(adam.state[weights[0]]["step"])))
