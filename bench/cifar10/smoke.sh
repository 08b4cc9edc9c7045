#!/usr/bin/env bash
# Smoke check of bench/cifar10/train_torch.py (the Python side of scripts/bench-cifar10.sh): a
# tiny 2-rank gloo training on Fashion-MNIST (256 train / 128 test samples, 1 epoch) must finish
# and write a summary.json with every field the driver reads, accuracies in [0,1], one RSS per rank.
# Usage: bench/cifar10/smoke_torch.sh. About 15-25 s on 2 cores.
set -euo pipefail
cd "$(dirname "$0")"
OUT=$(mktemp -d /tmp/cifar10-smoke.XXXXXX)
trap 'rm -rf "$OUT"' EXIT
timeout 120 /usr/bin/python3 train_torch.py --nproc_per_node 2 --backend gloo --train_subset 256 --test_subset 128 \
  --num_epochs 1 --batch_size 64 --num_workers 0 --output_path "$OUT" >"$OUT/log.txt" 2>&1 || {
  echo "train_torch.py failed (rc $?):"; cat "$OUT/log.txt"; exit 1; }
/usr/bin/python3 - "$OUT/summary.json" <<'PY'
import json, math, sys
s = json.load(open(sys.argv[1]))
want = {"implementation": str, "backend": str, "world_size": int, "dataset": str, "epochs": int, "batch_size": int,
        "train_samples_per_s": float, "epoch_seconds": list, "train_accuracy": float, "train_loss": float,
        "test_accuracy": float, "test_loss": float, "peak_rss_mb": list}
bad = [f"{k}: {s.get(k)!r} is not a {t.__name__}" for k, t in want.items() if not isinstance(s.get(k), t)]
bad += [f"{k} = {s[k]} is outside [0,1]" for k in ("train_accuracy", "test_accuracy") if not 0 <= s[k] <= 1]
bad += [f"{k} = {s[k]} is not finite and > 0" for k in ("train_samples_per_s", "train_loss", "test_loss")
        if not (math.isfinite(s[k]) and s[k] > 0)]
if (s["implementation"], s["world_size"], s["dataset"], s["epochs"]) != ("python", 2, "fashion-mnist", 1):
    bad.append("implementation/world_size/dataset/epochs are not python/2/fashion-mnist/1")
if len(s["epoch_seconds"]) != 1 or len(s["peak_rss_mb"]) != 2 or min(s["peak_rss_mb"]) <= 0:
    bad.append(f"want 1 epoch time and 2 positive RSS values, got {s['epoch_seconds']} and {s['peak_rss_mb']}")
if bad:
    sys.exit("smoke_torch.sh: summary.json is wrong:\n  " + "\n  ".join(bad))
print(f"ok: {s['train_samples_per_s']:.1f} samples/s, test accuracy {s['test_accuracy']:.3f}, RSS {s['peak_rss_mb']}")
PY
