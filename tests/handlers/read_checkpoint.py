"""Independent reader for kindling's checkpoint files (tests/handlers/checkpoint_test.cpp).

Usage: read_checkpoint.py BEST_MODEL_FILE TRAINING_CHECKPOINT_FILE
Loads both with torch.load, loads the model file into torchvision's resnet18 strictly, and
prints what the test compares."""
import sys

import torch
import torchvision

best_path, training_path = sys.argv[1], sys.argv[2]

# torch >= 2.6 loads with weights_only=True by default, which refuses the type tags that
# LibTorch's pickler writes for dicts and lists; allowing those (harmless) helpers is enough.
if hasattr(torch.serialization, "add_safe_globals"):
    import torch.jit._pickle as tags
    torch.serialization.add_safe_globals([tags.restore_type_tag, tags.build_intlist, tags.build_doublelist,
                                          tags.build_boollist, tags.build_tensorlist])

weights = torch.load(best_path)
model = torchvision.models.resnet18(num_classes=10)
model.load_state_dict(weights, strict=True)
print("torchvision resnet18: loaded strictly")
print("fc.weight sum %.5f" % model.fc.weight.detach().sum().item())

ckpt = torch.load(training_path)
assert isinstance(ckpt, dict), type(ckpt)
print("training keys: " + " ".join(sorted(ckpt.keys())))
t = ckpt["trainer"]
print("trainer: epoch_length=%d iteration=%d max_epochs=%d" % (t["epoch_length"], t["iteration"], t["max_epochs"]))
opt = ckpt["optimizer"]
group = opt["param_groups"][0]
print("optimizer: groups=%d lr=%g momentum=%g states=%d" % (len(opt["param_groups"]), group["lr"], group["momentum"],
                                                             len(opt["state"])))
assert all(isinstance(v["momentum_buffer"], torch.Tensor) for v in opt["state"].values())
assert isinstance(ckpt["rng"]["torch_cpu"], torch.Tensor)
assert torch.equal(ckpt["model"]["fc.weight"], weights["fc.weight"])
