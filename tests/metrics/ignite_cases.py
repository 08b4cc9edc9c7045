"""ignite's metrics on given cases, for tests/metrics/ignite_cases.h (label_agreement_test.cpp,
sample_means_test.cpp).

Usage: ignite_cases.py DATA
DATA: JSON, {"cases": [{"name": ..., "metric": ..., "args": {...}, "batches": [[y_pred, y], ...]}]}
with y_pred and y as nested lists and "dtypes", one for each ("long", "float" or "double"). Each
case's metric (an ignite.metrics class by name, e.g. CohenKappa, MatthewsCorrCoef, PSNR) is
made with args (keyword arguments as ignite spells them), updated with every batch and
computed; prints "<name> <values, comma-separated, 17 significant digits>" per case and
"IGNITE <version>".

Exits 77 (skipped) where ignite 0.5.5 (with the scikit-learn its MatthewsCorrCoef calls) cannot
be imported under a torch 1.x (Debian's python3); under torch 2.x (the pinned venv of
scripts/torch2-env.sh) that is an error (exit 1).
"""
import json
import sys

import torch

from ignite_pinned import require

VERSION = require("ignite.metrics", "sklearn")
import ignite.metrics as im  # noqa: E402  (after the check above)

DTYPES = {"long": torch.long, "float": torch.float32, "double": torch.float64}


def main():
    with open(sys.argv[1]) as f:
        cases = json.load(f)["cases"]
    print(f"IGNITE {VERSION}")
    for case in cases:
        metric = getattr(im, case["metric"])(**case.get("args", {}))
        pred_dtype, y_dtype = DTYPES[case["dtypes"][0]], DTYPES[case["dtypes"][1]]
        for y_pred, y in case["batches"]:
            metric.update((torch.tensor(y_pred, dtype=pred_dtype), torch.tensor(y, dtype=y_dtype)))
        value = torch.as_tensor(metric.compute(), dtype=torch.float64).reshape(-1)
        print(case["name"], ",".join(f"{v:.17g}" for v in value.tolist()))


if __name__ == "__main__":
    main()
