"""Loads what a sharded model saved whole (tests/nn/sharding_checkpoint_test.cpp) into Python
torch's own module and Adam, with the names and parameter groups of the test's model, and steps
the optimizer once. With a second argument, the folder of the same state's sharded files
(kindling::handlers::save_sharded): reads every rank's file with torch.load and puts each
parameter and each Adam moment together from the pieces and their offsets, which must equal the
whole file's.

Usage: sharding_state_in_python.py STATE_FILE [SHARDED_FOLDER]"""
import os
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


def from_sharded_files(folder, want):
    """Every parameter and Adam moment of the sharded save in `folder`, put together, against
    `want` (the whole file's state): returns how many tensors were compared."""
    marker = open(os.path.join(folder, "sharded-checkpoint.txt")).read().split()
    world = int(marker[marker.index("world") + 1])
    files = [torch.load(os.path.join(folder, "shard-%d-of-%d.pt" % (r, world))) for r in range(world)]
    compared = 0
    for name, whole in want["model"].items():
        if name not in files[0]["parameters"]:
            continue  # a buffer
        flat = torch.full((whole.numel(),), float("nan"))
        for f in files:
            piece = f["parameters"][name]
            flat[f["offsets"][name]:f["offsets"][name] + piece.numel()] = piece
        assert torch.equal(flat.view(whole.shape), whole), name
        compared += 1
    for index, state in want["optimizer"]["state"].items():
        name = files[0]["optimizer_parameters"][index]
        for key in ("exp_avg", "exp_avg_sq"):
            flat = torch.full((state[key].numel(),), float("nan"))
            for f in files:
                i = f["optimizer_parameters"].index(name)
                piece = f["optimizer"]["state"][i][key]
                flat[f["offsets"][name]:f["offsets"][name] + piece.numel()] = piece
            assert torch.equal(flat.view(state[key].shape), state[key]), (name, key)
            compared += 1
    return compared


if len(sys.argv) > 2:
    # Read again: torch >= 2's Adam.load_state_dict keeps the loaded tensors as its state, which
    # the step above changed in `saved`.
    whole = torch.load(sys.argv[1])
    print("sharded files put together in torch: %d tensors equal the whole file's" % from_sharded_files(sys.argv[2], whole))
