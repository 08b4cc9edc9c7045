"""ignite 0.5.5's Checkpoint and metric states against kindling's, for checkpoint_ignite_test.cpp.

Usage: ignite_checkpoint.py read KINDLING_FILE | write FOLDER
read: loads kindling's file, {"model": Linear(2, 2), "metrics": {"accuracy": ..., "loss": ...}},
with Checkpoint.load_objects into ignite's objects of the same nesting and prints "accuracy <v>"
and "loss <v>" from their compute(). write: updates ignite's Accuracy and Loss with the batch
below, saves them with ignite's Checkpoint as to_save={"model": ..., "metrics": {...}} into
FOLDER and prints the file's path. Prints "IGNITE <version>"; exits 77 where ignite 0.5.5 is
not importable under a torch 1.x (Debian's python3), 1 under torch 2.x.
"""
import os
import sys

import torch
import torch.optim.lr_scheduler as schedulers

if not hasattr(schedulers, "LRScheduler"):  # torch 1.13: ignite 0.5.5 imports torch 2's name
    schedulers.LRScheduler = schedulers._LRScheduler
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "metrics"))
from ignite_pinned import require  # noqa: E402

VERSION = require("ignite.handlers", "ignite.metrics")
from ignite.engine import Engine  # noqa: E402
from ignite.handlers import Checkpoint, DiskSaver  # noqa: E402
from ignite.metrics import Accuracy, Loss  # noqa: E402

# The batch checkpoint_ignite_test.cpp feeds kindling's metrics.
LOGITS = torch.tensor([[0.1, 0.9], [0.8, 0.2], [0.3, 0.7]])
LABELS = torch.tensor([1, 1, 0])


def objects():
    metrics = {"accuracy": Accuracy(), "loss": Loss(torch.nn.functional.cross_entropy)}
    for m in metrics.values():
        m.reset()
    return {"model": torch.nn.Linear(2, 2), "metrics": metrics}


def main():
    print(f"IGNITE {VERSION}")
    to_use = objects()
    if sys.argv[1] == "read":
        # torch >= 2.6 loads with weights_only=True, which needs LibTorch's pickler's type tags allowed
        if hasattr(torch.serialization, "add_safe_globals"):
            import torch.jit._pickle as tags
            torch.serialization.add_safe_globals([tags.restore_type_tag, tags.build_intlist,
                                                  tags.build_doublelist, tags.build_boollist,
                                                  tags.build_tensorlist])
        Checkpoint.load_objects(to_load=to_use, checkpoint=torch.load(sys.argv[2]))
        for name, metric in to_use["metrics"].items():
            print("%s %.17g" % (name, float(metric.compute())))
        print("model.bias %.17g %.17g" % tuple(to_use["model"].bias.tolist()))
        return
    for metric in to_use["metrics"].values():
        metric.update((LOGITS, LABELS))
    with torch.no_grad():
        to_use["model"].bias.copy_(torch.tensor([0.25, -0.5]))
    checkpoint = Checkpoint(to_use, DiskSaver(sys.argv[2], require_empty=False))
    checkpoint(Engine(lambda engine, batch: None))
    print("FILE " + os.path.join(sys.argv[2], checkpoint.last_checkpoint))


if __name__ == "__main__":
    main()
