#!/usr/bin/env bash
# DDP with gradients as bucket views (the default) against gradients copied into the buckets and
# back (bench_ddp --copy-gradients), same run: ResNet-18 on Fashion-MNIST, 2 ranks on this host,
# gloo (kindling-run) and mpi (mpirun), runs interleaved, medians of samples/s and of StepTimes'
# backward and communication wait per step. Usage: scripts/bench-bucket-views.sh [repeats]
# (default 3). Needs a build (scripts/build.sh); KINDLING_LIBTORCH=pip uses the 2.15 build, whose
# Optimizer::zero_grad() resets gradients to none (so the copy into the bucket stays there).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/libtorch-choice.sh
BUILD=${BUILD:-$(build_dir_of "${KINDLING_LIBTORCH:-debian}")}
REPEATS=${1:-3}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
BENCH="$BUILD/bench/ddp/bench_ddp"
ARGS=(--model resnet18 --batch 32 --steps 20 --warmup 3)
OUT=$(mktemp)
trap 'rm -f "$OUT"' EXIT

one() {  # backend mode(views|copies)
  local flag=() line
  [ "$2" = copies ] && flag=(--copy-gradients)
  if [ "$1" = gloo ]; then
    line=$(timeout 300 "$BUILD/kindling-run" --standalone --nproc_per_node 2 "$BENCH" "${ARGS[@]}" --backend gloo "${flag[@]}" 2>&1 | grep RESULT)
  else
    line=$(timeout 300 mpirun --oversubscribe -np 2 "$BENCH" "${ARGS[@]}" --backend mpi "${flag[@]}" 2>&1 | grep RESULT)
  fi
  echo "$1 $2 $line" | tee -a "$OUT"
}

echo "# machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); build $BUILD"
for r in $(seq "$REPEATS"); do
  for backend in gloo mpi; do
    one "$backend" views
    one "$backend" copies
  done
done

python3 - "$OUT" <<'PY'
import re, statistics, sys
runs = {}
for line in open(sys.argv[1]):
    backend, mode = line.split()[:2]
    fields = dict(re.findall(r"(\w+)=([\d.]+)", line))
    runs.setdefault((backend, mode), []).append(fields)
med = lambda rows, key: statistics.median(float(r[key]) for r in rows)
print("\n| backend | gradients | samples/s | backward ms/step | comm wait ms/step |")
print("|---|---|---|---|---|")
for backend in ("gloo", "mpi"):
    for mode in ("views", "copies"):
        rows = runs.get((backend, mode), [])
        if rows:
            print(f"| {backend} | {mode} | {med(rows, 'samples_per_s'):,.1f} | {med(rows, 'backward_ms'):.1f} | "
                  f"{med(rows, 'comm_wait_ms'):.1f} |")
    v, c = runs.get((backend, "views")), runs.get((backend, "copies"))
    if v and c:
        print(f"| {backend} | views / copies | {med(v, 'samples_per_s') / med(c, 'samples_per_s'):.3f} | | |")
print(f"\nmedians of {len(next(iter(runs.values())))} interleaved runs")
PY
