#!/usr/bin/env bash
# DDP across hosts of the namespace cluster (bench/cluster/bench_hosts.py): ResNet-18 and the
# MLP on 2 and 4 hosts with 1 rank each, links capped at 100mbit and 1gbit and uncapped;
# kindling gloo, kindling mpi and Python torch DDP (gloo) interleaved, beside the no-comm
# limit; medians, bytes per step on the links. Needs root and a build (scripts/build.sh).
# Usage: scripts/bench-cluster.sh [repeats] (default 3); extra flags go to bench_hosts.py.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/libtorch-choice.sh
REPEATS=${1:-3}
shift || true
ensure_benchmarks "${BUILD:-build}"
exec /usr/bin/python3 bench/cluster/bench_hosts.py --build "${BUILD:-build}" --repeats "$REPEATS" "$@"
