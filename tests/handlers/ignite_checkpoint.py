"""ignite 0.5.5's Checkpoint and metric states against kindling's, for checkpoint_ignite_test.cpp.

Usage: ignite_checkpoint.py read KINDLING_FILE
Loads kindling's file, {"model": Linear(2, 2), "metrics": {"accuracy": ..., "loss": ...}}, with
Checkpoint.load_objects into ignite's objects of the same nesting and prints "accuracy <v>",
"loss <v>" from their compute() and "model.bias <v> <v>". (The other way, a file ignite's
Checkpoint writes, holds OrderedDicts that LibTorch's reader cannot rebuild: docs/handlers.md.)
Prints "IGNITE <version>"; exits 77 where ignite 0.5.5 is not importable under a torch 1.x
(Debian's python3), 1 under torch 2.x.
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
from ignite.handlers import Checkpoint  # noqa: E402
from ignite.metrics import Accuracy, Loss  # noqa: E402


def objects():
    metrics = {"accuracy": Accuracy(), "loss": Loss(torch.nn.functional.cross_entropy)}
    for m in metrics.values():
        m.reset()
    return {"model": torch.nn.Linear(2, 2), "metrics": metrics}


def main():
    print(f"IGNITE {VERSION}")
    to_use = objects()
    if len(sys.argv) == 3 and sys.argv[1] == "read":
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
    sys.exit("usage: ignite_checkpoint.py read KINDLING_FILE")

if __name__ == "__main__":
    main()
