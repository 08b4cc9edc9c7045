#!/usr/bin/env bash
# Smoke check of scripts/bench-cifar10.sh's parts on a tiny 2-rank gloo training (Fashion-MNIST,
# 256 train / 128 test samples, 1 epoch), each started as the driver starts it:
#   1. bench/cifar10/train_torch.py (plain torch), under peak_memory.py;
#   2. bench/cifar10/train_ignite.py (the real ignite, scripts/python-peer.sh PYTHON) under
#      torchrun, with --profile;
#   3. examples/cifar10 (the binary given as $1) with --profile;
# every summary.json must hold the fields report.py reads (accuracies in [0,1], one RSS per
# rank, the iteration split where profiled), every memory.json a positive peak; then report.py
# must print the three variants and the kindling / ignite comparison.
# The Python peers run on the torch of PYTHON, the LibTorch that cifar10 was built against
# (Debian's python3 for 1.13: ignite 0.4.13; the venv of scripts/torch2-env.sh for 2.15: ignite 0.5.5).
# Usage: bench/cifar10/smoke.sh path/to/cifar10 [PYTHON]. About 60 s on 2 cores (a 1.13 venv: 15 s once).
set -euo pipefail
BIN=$(realpath "${1:?usage: smoke.sh path/to/examples/cifar10/cifar10}")
cd "$(dirname "$0")/../.."
PEER=$(scripts/python-peer.sh "${2:-/usr/bin/python3}")
OUT=$(mktemp -d /tmp/cifar10-smoke.XXXXXX)
trap 'rm -rf "$OUT"' EXIT
TINY=(--train_subset 256 --test_subset 128 --num_epochs 1 --batch_size 64 --num_workers 0)

run() {  # variant command... : the run under peak_memory.py in OUT/r1/<variant>, as the driver does
  local dir=$OUT/r1/$1
  shift
  mkdir -p "$dir"
  timeout 180 /usr/bin/python3 bench/cifar10/peak_memory.py --every 0.2 --ranks 2 --out "$dir/memory.json" -- \
    "$@" --output_path "$dir" "${TINY[@]}" >"$dir/log.txt" 2>&1 || {
    echo "smoke.sh: $* failed (rc $?):"; cat "$dir/log.txt"; exit 1; }
}
run python-2 "$PEER" bench/cifar10/train_torch.py --nproc_per_node 2 --backend gloo
run ignite-2 "$PEER" tests/launch/torchrun_compat.py --standalone --nproc_per_node 2 bench/cifar10/train_ignite.py \
  --backend gloo --profile
run kindling-gloo-2 "$BIN" --nproc_per_node 2 --backend gloo --profile

/usr/bin/python3 - "$OUT/r1" <<'PY'
import glob, json, math, os, sys
root, bad = sys.argv[1], []
want = {"implementation": str, "backend": str, "world_size": int, "dataset": str, "epochs": int, "batch_size": int,
        "train_samples_per_s": float, "epoch_seconds": list, "train_accuracy": float, "train_loss": float,
        "test_accuracy": float, "test_loss": float, "peak_rss_mb": list}
for variant, profiled in (("python-2", False), ("ignite-2", True), ("kindling-gloo-2", True)):
    found = glob.glob(os.path.join(root, variant, "**", "summary.json"), recursive=True)
    if len(found) != 1:
        bad.append(f"{variant}: {len(found)} summary.json files, want 1")
        continue
    s = json.load(open(found[0]))
    bad += [f"{variant}: {k} = {s.get(k)!r} is not a {t.__name__}" for k, t in want.items() if not isinstance(s.get(k), t)]
    if bad:
        continue
    bad += [f"{variant}: {k} = {s[k]} is outside [0,1]" for k in ("train_accuracy", "test_accuracy") if not 0 <= s[k] <= 1]
    bad += [f"{variant}: {k} = {s[k]} is not finite and > 0" for k in ("train_samples_per_s", "train_loss", "test_loss")
            if not (math.isfinite(s[k]) and s[k] > 0)]
    if (s["world_size"], s["dataset"], s["epochs"]) != (2, "fashion-mnist", 1):
        bad.append(f"{variant}: world_size/dataset/epochs are not 2/fashion-mnist/1")
    if len(s["epoch_seconds"]) != 1 or len(s["peak_rss_mb"]) != 2 or min(s["peak_rss_mb"]) <= 0:
        bad.append(f"{variant}: want 1 epoch time and 2 positive RSS values, got {s['epoch_seconds']}, {s['peak_rss_mb']}")
    split = s.get("iteration_split_ms", {})
    need = {"data", "forward", "backward", "optimizer", "iteration"} if profiled else set()
    if need - set(split) or any(not (math.isfinite(v) and v >= 0) for v in split.values()):
        bad.append(f"{variant}: iteration_split_ms {split} lacks one of {sorted(need)} or holds a negative value")
    if profiled and split and split["forward"] + split["backward"] > 1.5 * split["iteration"]:
        bad.append(f"{variant}: forward + backward exceed the whole iteration: {split}")
    memory = json.load(open(os.path.join(root, variant, "memory.json")))
    if not memory["peak_pss_mb_per_rank"] > 50 or memory["samples"] < 1:
        bad.append(f"{variant}: memory.json {memory}: want a peak above 50 MiB per rank from at least one sample")
if bad:
    sys.exit("smoke.sh: wrong results:\n  " + "\n  ".join(bad))
print("ok: three summaries and memory peaks")
PY
/usr/bin/python3 bench/cifar10/report.py "$OUT" 1 >"$OUT/report.txt"
for row in "| Python torch, gloo | 2 |" "| ignite, gloo (torchrun) | 2 |" "| kindling, gloo | 2 |" \
  "| kindling gloo 2 ranks / ignite gloo 2 ranks |"; do
  grep -qF "$row" "$OUT/report.txt" || { echo "smoke.sh: the report lacks '$row':"; cat "$OUT/report.txt"; exit 1; }
done
echo "ok: the report has every variant and the comparison"
