#!/usr/bin/env bash
# Sharded data-parallel against DDP and against torch's fully_shard, in one run on this host:
# ResNet-18 over Fashion-MNIST, SGD with momentum, 2 ranks (or RANKS), gloo, runs interleaved:
# kindling DDP, kindling --sharding zero2 / zero3 (bench_ddp), torch's DDP and fully_shard with
# reshard_after_forward False / True (bench/ddp/ddp_python.py --fsdp, each ResNet layer a unit as
# in kindling) on the same torch. Prints medians of samples/s, the ratios, and kindling's
# parameters kept between steps, most gathered at once and optimizer state per rank.
# Usage: KINDLING_LIBTORCH=pip scripts/bench-sharding.sh [repeats (default 3)]
#   (the 2.15 build: torch's fully_shard needs torch >= 2.6); RANKS=4 for 4 ranks.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/libtorch-choice.sh
CHOICE=${KINDLING_LIBTORCH:-pip}
BUILD=${BUILD:-$(build_dir_of "$CHOICE")}
PYTHON=$(torch_python_of "$CHOICE")
ensure_benchmarks "$BUILD"
REPEATS=${1:-3} RANKS=${RANKS:-2}
BENCH="$BUILD/bench/ddp/bench_ddp"
ARGS=(--model resnet18 --batch 32 --steps 20 --warmup 3)
OUT=$(mktemp)
trap 'rm -f "$OUT"' EXIT

run() {  # label, then the program and its arguments
  local label=$1 line
  shift
  line=$(timeout 600 "$BUILD/kindling-run" --standalone --nproc_per_node "$RANKS" "$@" 2>&1 | grep RESULT)
  echo "$label $line" | tee -a "$OUT"
}

echo "# machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); build $BUILD; $RANKS ranks"
for r in $(seq "$REPEATS"); do
  run kindling-ddp "$BENCH" "${ARGS[@]}" --backend gloo
  run kindling-zero2 "$BENCH" "${ARGS[@]}" --backend gloo --sharding zero2
  run kindling-zero3 "$BENCH" "${ARGS[@]}" --backend gloo --sharding zero3
  run torch-ddp "$PYTHON" bench/ddp/ddp_python.py "${ARGS[@]}"
  run torch-fsdp2-zero2 "$PYTHON" bench/ddp/ddp_python.py "${ARGS[@]}" --fsdp zero2
  run torch-fsdp2-zero3 "$PYTHON" bench/ddp/ddp_python.py "${ARGS[@]}" --fsdp zero3
done

python3 - "$OUT" <<'PY'
import re, statistics, sys
runs = {}
for line in open(sys.argv[1]):
    runs.setdefault(line.split()[0], []).append(dict(re.findall(r"(\w+)=([\d.]+)", line)))
med = lambda label, key: statistics.median(float(r[key]) for r in runs[label])
print("\n| variant | samples/s | / kindling DDP | parameters kept per rank | most gathered at once | optimizer state per rank |")
print("|---|---|---|---|---|---|")
for label in runs:
    kindling = label.startswith("kindling")
    extra = (f"{med(label, 'param_elements'):,.0f} | {med(label, 'peak_gathered'):,.0f} | {med(label, 'state_elements'):,.0f}"
             if kindling else "| |")
    print(f"| {label} | {med(label, 'samples_per_s'):,.1f} | {med(label, 'samples_per_s') / med('kindling-ddp', 'samples_per_s'):.3f} | {extra} |")
for mine, theirs in (("kindling-zero2", "torch-fsdp2-zero2"), ("kindling-zero3", "torch-fsdp2-zero3"), ("kindling-ddp", "torch-ddp")):
    if mine in runs and theirs in runs:
        print(f"{mine} / {theirs}: {med(mine, 'samples_per_s') / med(theirs, 'samples_per_s'):.3f}")
print(f"\nmedians of {len(next(iter(runs.values())))} interleaved runs")
PY
