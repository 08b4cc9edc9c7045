#!/usr/bin/env bash
# Two variants of bench_ddp in one run: A (the defaults) against B (the defaults and FLAG), on
# ResNet-18 over Fashion-MNIST, 2 ranks on this host, gloo (kindling-run) and mpi (mpirun), runs
# interleaved; medians of samples/s, of StepTimes' backward and communication wait per step, and
# the optimizer's state elements per rank.
# Usage: scripts/bench-ddp-ab.sh LABEL_A LABEL_B FLAG [repeats (default 3)]
#   FLAG is a bench_ddp flag, or NAME=VALUE: an environment variable of B's ranks.
#   e.g. scripts/bench-ddp-ab.sh views copies --copy-gradients 3   (scripts/bench-bucket-views.sh)
#        scripts/bench-ddp-ab.sh plain zero --zero 3                (ZeroRedundancyOptimizer)
#        scripts/bench-ddp-ab.sh on off KINDLING_FLIGHT_RECORDER=0 3 (the flight recorder's cost)
#        scripts/bench-ddp-ab.sh off on --timeline 3                (the timeline's cost while it records)
# Needs a build (scripts/build.sh); KINDLING_LIBTORCH=pip uses the 2.15 build.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/libtorch-choice.sh
BUILD=${BUILD:-$(build_dir_of "${KINDLING_LIBTORCH:-debian}")}
ensure_benchmarks "$BUILD"
LABEL_A=$1 LABEL_B=$2 FLAG=$3 REPEATS=${4:-3}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
BENCH="$BUILD/bench/ddp/bench_ddp"
ARGS=(--model resnet18 --batch 32 --steps 20 --warmup 3)
OUT=$(mktemp)
trap 'rm -f "$OUT"' EXIT

one() {  # backend label
  local flag=() env=() export=() line
  if [ "$2" = "$LABEL_B" ]; then
    if [[ "$FLAG" =~ ^[A-Z_][A-Z0-9_]*= ]]; then env=("$FLAG") export=(-x "${FLAG%%=*}"); else flag=("$FLAG"); fi
  fi
  if [ "$1" = gloo ]; then
    line=$(env "${env[@]}" timeout 300 "$BUILD/kindling-run" --standalone --nproc_per_node 2 "$BENCH" "${ARGS[@]}" --backend gloo "${flag[@]}" 2>&1 | grep RESULT)
  else
    line=$(env "${env[@]}" timeout 300 mpirun --oversubscribe "${export[@]}" -np 2 "$BENCH" "${ARGS[@]}" --backend mpi "${flag[@]}" 2>&1 | grep RESULT)
  fi
  echo "$1 $2 $line" | tee -a "$OUT"
}

echo "# machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); build $BUILD"
for r in $(seq "$REPEATS"); do
  for backend in gloo mpi; do
    one "$backend" "$LABEL_A"
    one "$backend" "$LABEL_B"
  done
done

python3 - "$OUT" "$LABEL_A" "$LABEL_B" <<'PY'
import re, statistics, sys
out, a, b = sys.argv[1:4]
runs = {}
for line in open(out):
    backend, mode = line.split()[:2]
    fields = dict(re.findall(r"(\w+)=([\d.]+)", line))
    runs.setdefault((backend, mode), []).append(fields)
med = lambda rows, key: statistics.median(float(r[key]) for r in rows)
print("\n| backend | variant | samples/s | backward ms/step | comm wait ms/step | optimizer state per rank |")
print("|---|---|---|---|---|---|")
for backend in ("gloo", "mpi"):
    for mode in (a, b):
        rows = runs.get((backend, mode), [])
        if rows:
            print(f"| {backend} | {mode} | {med(rows, 'samples_per_s'):,.1f} | {med(rows, 'backward_ms'):.1f} | "
                  f"{med(rows, 'comm_wait_ms'):.1f} | {med(rows, 'state_elements'):,.0f} |")
    ra, rb = runs.get((backend, a)), runs.get((backend, b))
    if ra and rb:
        print(f"| {backend} | {a} / {b} | {med(ra, 'samples_per_s') / med(rb, 'samples_per_s'):.3f} | | | |")
print(f"\nmedians of {len(next(iter(runs.values())))} interleaved runs")
PY
