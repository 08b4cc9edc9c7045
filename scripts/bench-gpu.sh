#!/usr/bin/env bash
# GPU figures (needs a CUDA LibTorch build; the README's GPU section came from this):
# 1. bench_collectives: kindling vs raw c10d on the GPU: nccl at world size 1, gloo on CUDA
#    tensors with 2 ranks sharing the GPU.
# 2. One ResNet18 epoch on CIFAR-shaped data: kindling (bench/gpu/main.cpp) against Python
#    PyTorch (bench/gpu/resnet_gpu.py, torchvision resnet18), AMP off and on, runs
#    interleaved, median of the repeats per column.
# Usage: scripts/bench-gpu.sh [build dir] [repeats]   (PYTHON: the interpreter with torch)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/libtorch-choice.sh
BUILD=${1:-build}
ensure_benchmarks "$BUILD"
REPEATS=${2:-3}
PY=${PYTHON:-python3}
TMP=$(mktemp)
trap 'rm -f "$TMP"' EXIT
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | sed 's/^/# GPU: /'
$PY -c 'import torch; print("# PyTorch", torch.__version__, "CUDA", torch.version.cuda, "cuDNN", torch.backends.cudnn.version())'

echo "## all_reduce, nccl, 1 rank"
RANK=0 WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=29710 \
  "$BUILD/bench/collectives/bench_collectives" -B nccl -b 4 -e 256M -f 8 -n 50 -w 5 -r 5
echo "## all_reduce, gloo on CUDA tensors, 2 ranks on one GPU"
pids=()
for r in 0 1; do
  RANK=$r LOCAL_RANK=$r WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29720 \
    "$BUILD/bench/collectives/bench_collectives" -B gloo -b 4 -e 64M -f 16 -n 20 -w 3 -r 5 &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p"; done  # set -e: a failed rank stops the script

ARGS="--images ${IMAGES:-50000} --batch 256 --epochs 3"
for r in $(seq "$REPEATS"); do
  for amp in 0 1; do
    $PY bench/gpu/resnet_gpu.py $ARGS --amp $amp | grep RESULT | tee -a "$TMP"
    "$BUILD/bench/gpu/bench_resnet_gpu" $ARGS --amp $amp | grep RESULT | tee -a "$TMP"
  done
done
$PY - "$TMP" <<'PYEOF'
import re, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    f = dict(kv.split("=") for kv in line.split()[1:])
    rows.setdefault((f["impl"], f["amp"]), []).append(f)
print("## ResNet18 epoch (median of the timed epochs of all repeats)")
print("| AMP | impl | images/s | epoch s | peak GPU MiB |")
print("|---|---|---|---|---|")
for amp in ("0", "1"):
    med = {}
    for impl in ("python", "kindling"):
        rs = rows.get((impl, amp), [])
        if not rs:
            continue
        ips = statistics.median(float(r["images_per_s"]) for r in rs)
        sec = statistics.median(float(r["seconds"]) for r in rs)
        peak = statistics.median(float(r["peak_mib"]) for r in rs)
        med[impl] = ips
        print(f"| {'on' if amp == '1' else 'off'} | {impl} | {ips:.0f} | {sec:.3f} | {peak:.0f} |")
    if len(med) == 2:
        print(f"| {'on' if amp == '1' else 'off'} | kindling / python | {med['kindling'] / med['python']:.3f} | | |")
PYEOF
