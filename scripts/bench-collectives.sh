#!/usr/bin/env bash
# Runs bench/collectives with 2 local ranks (kindling and raw c10d in the same run), then the
# Python torch.distributed script on the same sizes. Extra arguments go to both.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/build.sh >/dev/null
args=("$@")
[ ${#args[@]} -eq 0 ] && args=(-b 4 -e 64M -f 4 -n 200 -w 20 -r 9)
export WORLD_SIZE=2 MASTER_ADDR=127.0.0.1
MASTER_PORT=${MASTER_PORT:-29600}
for r in 0 1; do RANK=$r LOCAL_RANK=$r LOCAL_WORLD_SIZE=2 MASTER_PORT=$MASTER_PORT ./build/bench/collectives/bench_collectives "${args[@]}" & done
wait
for r in 0 1; do RANK=$r MASTER_PORT=$((MASTER_PORT + 10)) /usr/bin/python3 bench/collectives/torch_collectives.py "${args[@]}" & done
wait
# The mpi backend against raw MPI_Allreduce (and memcpy), under a real mpirun.
if [ -x ./build/bench/collectives/bench_collectives ] && command -v mpirun >/dev/null; then
  # Ordinary tensors (staged through the shared window), then empty_comm_buffer memory.
  for m in tensor buffer; do
    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun -np 2 ./build/bench/collectives/bench_collectives \
      -B mpi -m "$m" "${args[@]}" || true
  done
fi
