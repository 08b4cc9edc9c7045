#!/usr/bin/env bash
# Runs bench/collectives with 2 local ranks (kindling and raw c10d in the same run), then the
# Python torch.distributed script on the same sizes, then (where mpirun exists) the mpi
# backend against raw MPI. Extra arguments go to every part. Any part that fails stops the
# script with its exit status. KINDLING_LIBTORCH=pip: the LibTorch 2.15 build and Python torch 2.15.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/build.sh >/dev/null
source scripts/libtorch-choice.sh
BUILD=${BUILD:-$(build_dir_of "${KINDLING_LIBTORCH:-debian}")}
ensure_benchmarks "$BUILD"
TORCH_PY=$(torch_python_of "${KINDLING_LIBTORCH:-debian}")
args=("$@")
[ ${#args[@]} -eq 0 ] && args=(-b 4 -e 64M -f 4 -n 200 -w 20 -r 9)
MASTER_PORT=${MASTER_PORT:-29600}
BENCH=./$BUILD/bench/collectives/bench_collectives

# Starts "$@" as ranks 0 and 1 (env:// variables for this command only) and fails when either rank fails.
two_ranks() {
  local port=$1 pids=() status=0
  shift
  for r in 0 1; do
    RANK=$r LOCAL_RANK=$r WORLD_SIZE=2 LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port "$@" &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || status=$?; done
  if [ "$status" -ne 0 ]; then echo "bench-collectives: '$*' failed (exit $status)" >&2; exit "$status"; fi
}

two_ranks "$MASTER_PORT" "$BENCH" "${args[@]}"
# The same with collective fingerprints on (docs/fault-tolerance.md): their cost per call,
# against the same raw c10d peer in the same run.
echo "== with KINDLING_DISTRIBUTED_DEBUG=DETAIL (collective fingerprints)"
KINDLING_DISTRIBUTED_DEBUG=DETAIL two_ranks $((MASTER_PORT + 5)) "$BENCH" "${args[@]}"
# The flight recorder is on by default (docs/debugging.md): the same runs with it off give its
# cost per call.
echo "== with KINDLING_FLIGHT_RECORDER=0 (flight recorder off)"
KINDLING_FLIGHT_RECORDER=0 two_ranks $((MASTER_PORT + 15)) "$BENCH" "${args[@]}"
two_ranks $((MASTER_PORT + 10)) "$TORCH_PY" bench/collectives/torch_collectives.py "${args[@]}"
# The mpi backend against raw MPI_Allreduce (and memcpy), under a real mpirun: ordinary
# tensors (staged through the shared window), then empty_comm_buffer memory.
if command -v mpirun >/dev/null; then
  for m in tensor buffer; do
    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun -np 2 "$BENCH" -B mpi -m "$m" "${args[@]}"
  done
  echo "== mpi, buffer, with KINDLING_FLIGHT_RECORDER=0 (flight recorder off)"
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun -np 2 -x KINDLING_FLIGHT_RECORDER=0 "$BENCH" -B mpi \
    -m buffer "${args[@]}"
else
  echo "bench-collectives: mpirun not found: the mpi part was not run" >&2
fi
