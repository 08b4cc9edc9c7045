"""ignite's metrics on given cases, for tests/metrics/ignite_cases.h (the metrics tests that
compare with ignite).

Usage: ignite_cases.py DATA
DATA: JSON, {"cases": [{"name": ..., "metric": ..., "args": {...}, "batches": [[y_pred, y], ...]}]}
with y_pred and y as nested lists and "dtypes", one for each ("long", "float" or "double"), and
"inputs", what each update gets: "tensors" (y_pred, y), "y_pred" alone, "tokens" (lists of
token ids, negative ids dropped), "text" (strings of character codes), "detection" (per-image dicts of boxes from padded
(B, N, 6) and (B, M, 5 or 6) rows) or "groups" (y's last
column is the group of each sample: (y_pred, y, group_labels)); see ignite_cases.h. An argument
"base_metric" given as {"metric": name, "args": {...}} is made as that ignite metric, and one
given as {"float64": [...]} is a float64 tensor. Each
case's metric (an ignite.metrics class by name, e.g. CohenKappa, PSNR, or a subpackage's as
"clustering.SilhouetteScore") is
made with args (keyword arguments as ignite spells them), updated with every batch and
computed (a dict's values in key order, a nested dict's keys joined by "/", a JSON text read
first, a tuple's tensors one after the other); prints "<name> <values, comma-separated, 17 significant digits>" per case and
"IGNITE <version>".

Exits 77 (skipped) where ignite 0.5.5 (with the scikit-learn its MatthewsCorrCoef calls) cannot
be imported under a torch 1.x (Debian's python3); under torch 2.x (the pinned venv of
scripts/torch2-env.sh) that is an error (exit 1).
"""
import importlib
import json
import sys

import torch

from ignite_pinned import require

VERSION = require("ignite.metrics", "sklearn")
import ignite.metrics as im  # noqa: E402  (after the check above)

DTYPES = {"long": torch.long, "float": torch.float32, "double": torch.float64}


def tokens(row):
    """A padded row of token ids as a list, padding (negative ids) dropped."""
    return [t for t in row if t >= 0]


def ignite_output(inputs, y_pred, y, pred_dtype, y_dtype):
    """What ignite's update gets for the case's kind of inputs (see ignite_cases.h)."""
    if inputs == "y_pred":
        return torch.tensor(y_pred, dtype=pred_dtype)
    if inputs == "tokens":
        return [tokens(c) for c in y_pred], [[tokens(r) for r in refs if tokens(r)] for refs in y]
    if inputs == "groups":  # y's last column is each sample's group
        y = torch.tensor(y, dtype=y_dtype)
        rest = y[:, :-1].squeeze(1) if y.shape[1] == 2 else y[:, :-1]
        return torch.tensor(y_pred, dtype=pred_dtype), rest, y[:, -1]
    if inputs == "detection":  # (B, N, 6) and (B, M, 5 or 6) padded with label -1: ignite's dicts per image
        images = []
        for rows in torch.tensor(y_pred, dtype=pred_dtype):
            rows = rows[rows[:, 5] >= 0]
            images.append({"bbox": rows[:, :4], "scores": rows[:, 4], "labels": rows[:, 5].long()})
        truths = []
        for rows in torch.tensor(y, dtype=y_dtype):
            rows = rows[rows[:, 4] >= 0]
            truth = {"bbox": rows[:, :4], "labels": rows[:, 4].long()}
            if rows.shape[1] == 6:
                truth["iscrowd"] = rows[:, 5].bool()
            truths.append(truth)
        return images, truths
    if inputs == "text":
        return ["".join(map(chr, tokens(p))) for p in y_pred], ["".join(map(chr, tokens(r))) for r in y]
    return torch.tensor(y_pred, dtype=pred_dtype), torch.tensor(y, dtype=y_dtype)


def main():
    with open(sys.argv[1]) as f:
        cases = json.load(f)["cases"]
    print(f"IGNITE {VERSION}")
    for case in cases:
        module, _, name = case["metric"].rpartition(".")  # "clustering.SilhouetteScore": a subpackage's
        owner = importlib.import_module("ignite.metrics." + module) if module else im
        args = dict(case.get("args", {}))
        for key, value in args.items():  # {"float64": [...]}: a float64 tensor (a list would be float32)
            if isinstance(value, dict) and "float64" in value:
                args[key] = torch.tensor(value["float64"], dtype=torch.float64)
        if isinstance(args.get("base_metric"), dict):  # {"metric": name, "args": {...}}: made here
            base = args["base_metric"]
            args["base_metric"] = getattr(im, base["metric"])(**base.get("args", {}))
        metric = getattr(owner, name)(**args)
        pred_dtype, y_dtype = DTYPES[case["dtypes"][0]], DTYPES[case["dtypes"][1]]
        for y_pred, y in case["batches"]:
            metric.update(ignite_output(case["inputs"], y_pred, y, pred_dtype, y_dtype))
        result = metric.compute()
        if isinstance(result, str):  # ClassificationReport's JSON text
            result = json.loads(result)
        if isinstance(result, dict):  # in key order, as ignite_cases.h reads a named value; a nested
            flat = {}                 # dict's keys joined by "/" (ClassificationReport's "0/recall")
            for key, value in result.items():
                flat.update({f"{key}/{k}": v for k, v in value.items()} if isinstance(value, dict) else {key: value})
            result = [flat[k] for k in sorted(flat)]
        if isinstance(result, tuple):  # a curve's (x, y, thresholds): their values one after the other
            result = torch.cat([torch.as_tensor(part, dtype=torch.float64).reshape(-1) for part in result])
        value = torch.as_tensor(result, dtype=torch.float64).reshape(-1)
        print(case["name"], ",".join(f"{v:.17g}" for v in value.tolist()))


if __name__ == "__main__":
    main()
