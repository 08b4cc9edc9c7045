#!/usr/bin/env bash
# The main job: installs dependencies, builds, and runs examples/hello_dist as a 2-process
# gloo job on this machine (RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT set by hand).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
./scripts/build.sh
nproc=${NPROC:-2}
export WORLD_SIZE=$nproc MASTER_ADDR=127.0.0.1 MASTER_PORT=${MASTER_PORT:-29500}
pids=()
for ((r = 0; r < nproc; r++)); do
  RANK=$r LOCAL_RANK=$r LOCAL_WORLD_SIZE=$nproc ./build/examples/hello_dist/hello_dist "$@" &
  pids+=($!)
done
status=0
for p in "${pids[@]}"; do wait "$p" || status=1; done
exit $status
