"""Reads a checkpoint of tests/nn/diloco_test.cpp's resume worker (the model and a DiLoCo optimizer
over AdamW, 2 pieces) in Python torch: every worker's inner state loads into torch's own AdamW and
each piece's outer state into torch's own Nesterov SGD, over parameters shaped as the model's.

Usage: diloco_state_in_python.py CHECKPOINT_FILE WORLD_SIZE"""
import sys

import torch

# torch >= 2.6 loads with weights_only=True by default, which refuses the type tags that
# LibTorch's pickler writes for dicts and lists; allowing those (harmless) helpers is enough.
if hasattr(torch.serialization, "add_safe_globals"):
    import torch.jit._pickle as tags
    torch.serialization.add_safe_globals([tags.restore_type_tag, tags.build_intlist, tags.build_doublelist,
                                          tags.build_boollist, tags.build_tensorlist])

saved = torch.load(sys.argv[1])
world = int(sys.argv[2])
state = saved["optimizer"]
shapes = [tuple(t.shape) for t in saved["model"].values()]
assert shapes == [(24, 12), (24,), (24, 24), (24,), (3, 24), (3,)], shapes
assert [tuple(t.shape) for t in state["global"]] == shapes, [t.shape for t in state["global"]]
assert len(state["workers"]) == world, len(state["workers"])
assert state["diloco"]["sync_every"] == 4 and state["diloco"]["fragments"] == 2, state["diloco"]
for worker in state["workers"]:
    params = [torch.nn.Parameter(t.clone()) for t in worker["params"]]
    inner = torch.optim.AdamW(params, lr=0.01)
    inner.load_state_dict(worker["inner"])
    assert all(inner.state[p]["exp_avg"].shape == p.shape for p in params)
    inner.step()  # usable as loaded
pieces = [[0, 1], [2, 3, 4, 5]]  # 312 and 675 elements: the boundary nearest to half
for piece, outer_state in zip(pieces, state["outer"]):
    globals_ = [torch.nn.Parameter(state["global"][i].clone()) for i in piece]
    outer = torch.optim.SGD(globals_, lr=0.7, momentum=0.9, nesterov=True)
    outer.load_state_dict(outer_state)
    assert all(outer.state[p]["momentum_buffer"].shape == p.shape for p in globals_)
assert state["steps"] == 6 and len(state["pending"]) == 1, (state["steps"], state["pending"])
print("OK: %d workers' inner AdamW and %d pieces' outer SGD loaded in torch %s" % (world, len(pieces), torch.__version__))
