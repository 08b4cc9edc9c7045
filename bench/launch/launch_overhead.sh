#!/usr/bin/env bash
# Wall time to start, run and tear down examples/hello_dist on N local ranks under each
# launcher: kindling-run, Debian's torchrun (static rendezvous, with its default 5 s monitor
# interval and with 0.2 s) and mpirun. Medians over R runs; ratios against torchrun with its
# default interval (the peer a user would otherwise reach for).
#   bench/launch/launch_overhead.sh [-n ranks] [-r runs] [build dir]
set -euo pipefail
ranks=3 runs=5
while getopts "n:r:" opt; do
  case $opt in
    n) ranks=$OPTARG ;;
    r) runs=$OPTARG ;;
    *) echo "usage: $0 [-n ranks] [-r runs] [build dir]" >&2; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
here=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:-$here/build}" && pwd)
hello=$build/examples/hello_dist/hello_dist
compat=$here/tests/launch/torchrun_compat.py
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

median() { sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

# time_of <command...>: seconds for one run; fails loudly if the job does not print N lines.
time_of() {
  local start end out
  start=$(date +%s.%N)
  out=$("$@" 2>/dev/null)
  end=$(date +%s.%N)
  local lines
  lines=$(grep -c "world_size=$ranks" <<<"$out" || true)
  if [ "$lines" -ne "$ranks" ]; then echo "launch_overhead: '$*' printed $lines of $ranks lines" >&2; exit 1; fi
  awk -v a="$start" -v b="$end" 'BEGIN { printf "%.3f\n", b - a }'
}

declare -A result
run_case() {
  local name=$1; shift
  local times=()
  for ((i = 0; i < runs; i++)); do times+=("$(time_of "$@")"); done
  result[$name]=$(printf '%s\n' "${times[@]}" | median)
}

port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

run_case "torchrun (monitor 5 s)" /usr/bin/python3 "$compat" --nproc_per_node "$ranks" --master_port "$(port)" --no_python "$hello"
run_case "torchrun (monitor 0.2 s)" /usr/bin/python3 "$compat" --monitor_interval 0.2 --nproc_per_node "$ranks" --master_port "$(port)" --no_python "$hello"
run_case "kindling-run" "$build/kindling-run" --nproc_per_node "$ranks" --master_port "$(port)" "$hello"
run_case "mpirun" mpirun --oversubscribe -np "$ranks" "$hello"

ref=${result["torchrun (monitor 5 s)"]}
printf '| launcher | median wall time (s), %d ranks, %d runs | ratio to torchrun |\n|---|---|---|\n' "$ranks" "$runs"
for name in "kindling-run" "torchrun (monitor 5 s)" "torchrun (monitor 0.2 s)" "mpirun"; do
  awk -v n="$name" -v t="${result[$name]}" -v r="$ref" 'BEGIN { printf "| %s | %.2f | %.2f |\n", n, t, t / r }'
done
