#!/usr/bin/env bash
# The mpi backend's all_reduce against raw MPI_Allreduce and memcpy, under a real mpirun with
# 2 ranks: bench/collectives on ordinary tensors (-m tensor) and on empty_comm_buffer memory
# (-m buffer), each repeated RUNS times (default 3, alternating); prints every run and a
# markdown table of per-size medians over the runs. This VM has slow phases that last
# seconds and hit kindling and MPI alike, hence whole repeated runs.
# Usage: scripts/bench-mpi.sh [runs]. Needs a build (scripts/build.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/libtorch-choice.sh
RUNS=${1:-3}
ensure_benchmarks "${BUILD:-build}"
BENCH=${BUILD:-build}/bench/collectives/bench_collectives
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
OUT=$(mktemp)
RAW=$(mktemp)
trap 'rm -f "$OUT" "$RAW"' EXIT
for ((i = 1; i <= RUNS; i++)); do
  for m in tensor buffer; do
    echo "# run $i, -m $m"
    timeout 600 mpirun -np 2 "$BENCH" -B mpi -m "$m" -b 4 -e 64M -f 4 -n 200 -w 20 -r 7 >"$RAW"
    cat "$RAW"
    awk -v m="$m" '$1 ~ /^[0-9]+$/ { print m, $1, $5, $8, $12, $11 }' "$RAW" >>"$OUT"
  done
done
/usr/bin/python3 - "$OUT" <<'EOF'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    m, size, k, raw, copy, wrong = line.split()
    rows.setdefault((m, int(size)), []).append((float(k), float(raw), float(copy), int(wrong)))
def fmt(b):
    for unit, div in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= div: return f"{b // div} {unit}"
    return f"{b} B"
print("\n| size | memory | kindling mpi (µs) | raw MPI_Allreduce (µs) | speed-up | busbw (GB/s) | memcpy (GB/s) | busbw / memcpy |")
print("|---|---|---|---|---|---|---|---|")
for (m, size) in sorted(rows, key=lambda x: (x[1], x[0] != "tensor")):
    r = rows[(m, size)]
    k = statistics.median(x[0] for x in r); raw = statistics.median(x[1] for x in r)
    copy = statistics.median(x[2] for x in r); bw = size / k / 1e3  # 2 ranks: busbw = algbw
    assert all(x[3] == 0 for x in r), "wrong results"
    print(f"| {fmt(size)} | {m} | {k:.2f} | {raw:.2f} | {raw / k:.2f}x | {bw:.2f} | {copy:.1f} | {bw / copy:.2f} |")
print(f"\nmedians over {len(next(iter(rows.values())))} runs; memory: tensor = at::empty, buffer = empty_comm_buffer (both sides)")
EOF
