"""ignite's regression metrics on given data, for tests/metrics/regression_sums_test.cpp and
regression_epoch_test.cpp.

Usage: ignite_regression.py DATA NAME...
DATA: one batch per line, "y_pred1,y_pred2,...;y1,y2,..." (float32 values as text). NAME: a
metric of ignite.metrics.regression, with ":ARG" for its first argument where it takes one
(KendallRankCorrelation:c). Each is updated with every batch, as float32 tensors of shape
(N,), and computed; prints "<NAME> <value with 17 significant digits>" per metric and
"IGNITE <version>".

Exits 77 (skipped) when ignite 0.5.5 cannot be imported under a torch 1.x (Debian's python3:
its newest ignite, 0.4.13, has no ignite.metrics.regression); under torch 2.x (the pinned
venv of scripts/torch2-env.sh, which installs ignite 0.5.5 and the scipy its rank
correlations call) a missing or other ignite is an error (exit 1).
"""
import sys

import torch

from ignite_pinned import require

VERSION = require("ignite.metrics.regression", "scipy")
from ignite.metrics import regression  # noqa: E402  (after the check above)


def batches(path):
    with open(path) as f:
        for line in f:
            pred, target = line.strip().split(";")
            yield (torch.tensor([float(v) for v in pred.split(",")], dtype=torch.float32),
                   torch.tensor([float(v) for v in target.split(",")], dtype=torch.float32))


def main():
    data = list(batches(sys.argv[1]))
    print(f"IGNITE {VERSION}")
    for spec in sys.argv[2:]:
        name, _, arg = spec.partition(":")
        metric = getattr(regression, name)(*([arg] if arg else []))
        for y_pred, y in data:
            metric.update((y_pred, y))
        print(f"{spec} {float(metric.compute()):.17g}")


if __name__ == "__main__":
    main()
