#!/usr/bin/env bash
# kindling's DDP against PyTorch's own c10d::Reducer (bench/ddp/reducer.cpp): the same model,
# data, buckets and gloo process group, 2 ranks on this machine, rounds interleaved, medians.
# Usage: scripts/bench-reducer.sh [rounds] (default 7). Needs a build (scripts/build.sh);
# KINDLING_LIBTORCH=pip measures the LibTorch 2.15 build.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/libtorch-choice.sh
BUILD=${BUILD:-$(build_dir_of "${KINDLING_LIBTORCH:-debian}")}
ensure_benchmarks "$BUILD"
ROUNDS=${1:-7}
declare -A ARGS=([mlp]="--batch 64 --steps 40 --warmup 5" [resnet18]="--batch 32 --steps 8 --warmup 2")
for model in mlp resnet18; do
  # shellcheck disable=SC2086
  "$BUILD/kindling-run" --standalone --nproc_per_node 2 "$BUILD/bench/ddp/bench_reducer" --model "$model" \
    ${ARGS[$model]} --rounds "$ROUNDS" 2>&1 | grep RESULT | sed 's/^\[rank0\]: //'
done
