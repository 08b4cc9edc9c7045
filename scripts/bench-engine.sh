#!/usr/bin/env bash
# kindling::engine's costs with Google Benchmark (bench/engine/main.cpp): event dispatch with
# 0/10/100 handlers, Accuracy update/compute, and one MLP epoch through
# create_supervised_trainer against the same loop written by hand, in the same run
# (interleaved repetitions, medians), live recovery's commit of an MLP and a ResNet-18, and the
# replica check of a ResNet-18 against its training step. Usage: scripts/bench-engine.sh [repetitions] (default 9).
# Needs a build with benchmarks (scripts/build.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/libtorch-choice.sh
BUILD=${BUILD:-build}
ensure_benchmarks "$BUILD"
REPS=${1:-9}
# Google Benchmark reports medians only over 2 repetitions or more.
[[ "$REPS" =~ ^[0-9]+$ ]] && [ "$REPS" -ge 2 ] ||
  { echo "bench-engine.sh: repetitions must be a whole number of at least 2 (medians), got '$REPS'" >&2; exit 2; }
OUT=$(mktemp)
trap 'rm -f "$OUT"' EXIT
echo "# machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
OMP_NUM_THREADS=1 "$BUILD/bench/engine/bench_engine" --benchmark_repetitions="$REPS" \
  --benchmark_enable_random_interleaving=true --benchmark_report_aggregates_only=true \
  --benchmark_format=json --benchmark_out="$OUT" --benchmark_out_format=json >/dev/null
python3 - "$OUT" <<'PY'
import json, sys
runs = json.load(open(sys.argv[1]))["benchmarks"]
med = {b["run_name"]: b for b in runs if b.get("aggregate_name") == "median"}
for name, b in med.items():
    print(f"{name:22s} median {b['real_time']:12.1f} {b['time_unit']}")
loop, eng = med["Epoch/0"]["real_time"], med["Epoch/1"]["real_time"]
print(f"engine epoch / hand-written epoch = {eng / loop:.4f} (samples/s ratio {loop / eng:.4f})")
timeline = med["Epoch/2"]["real_time"]
print(f"a timeline span: {med['TimelineSpan/0']['real_time']:.1f} ns while none records, "
      f"{med['TimelineSpan/1']['real_time']:.1f} ns while one records")
print(f"engine epoch with a timeline recording / engine epoch = {timeline / eng:.4f} "
      f"({(timeline - eng) / 20 * 1e3:.1f} us per step; {med['Epoch/2'].get('label', '')})")
step = eng / 20  # ms: one step of the MLP epoch (20 batches)
for arg, model in ((0, "the MLP above"), (1, "a ResNet-18")):
    commit = med[f"LiveCommit/{arg}"]
    print(f"a live-recovery commit of {model} with its SGD momentum: {commit['real_time']:.2f} ms "
          f"({commit['bytes_per_second'] / 1e9:.2f} GB/s of parameters and buffers)"
          + (f", {commit['real_time'] / step:.2f} of an MLP step" if arg == 0 else ""))
check, step = med["ReplicaCheck/1"]["real_time"], med["ReplicaCheck/0"]["real_time"]
print(f"the replica check of a ResNet-18: {check:.2f} ms against its training step's {step:.1f} ms (batch 32): "
      f"{check / step:.4f} of a step at every step, {check / step / 100:.6f} at every 100 (ReplicaCheck's default)")
PY
