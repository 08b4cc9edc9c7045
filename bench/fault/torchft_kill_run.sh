#!/usr/bin/env bash
# One run of issue 64's kill schedule against torchft, on loopback: torchft's lighthouse
# (min_replicas 1, a short join timeout), two replicas of bench/fault/torchft_peer.py; once both
# commit steps, 10 s of training, kill -9 of replica 1, 5 s later replica 1 again (a new process,
# healing from replica 0), 20 s more. Then bench/fault/torchft_recovery.py prints the numbers.
# Usage: bench/fault/torchft_kill_run.sh OUTDIR [LIGHTHOUSE_PORT] [extra torchft_peer.py options]
#   (run it under `flock /tmp/kindling-test.lock` where the test suites share the machine)
# Environment: PY (the torch 2.x venv's python), LIGHTHOUSE_FLAGS (default
#   "--min_replicas 1 --join_timeout_ms 1000"; add --heartbeat_timeout_ms / --quorum_tick_ms).
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:?usage: torchft_kill_run.sh OUTDIR [LIGHTHOUSE_PORT] [peer options]}
port=${2:-29510}
shift $(( $# >= 2 ? 2 : 1 ))
PY=${PY:-$HOME/.cache/kindling/torch-2.15.0/bin/python}
LH=$(dirname "$PY")/torchft_lighthouse
LIGHTHOUSE_FLAGS=${LIGHTHOUSE_FLAGS:---min_replicas 1 --join_timeout_ms 1000}
mkdir -p "$out"
rm -f "$out"/{r0,r1}.jsonl "$out"/{r0,r1,lighthouse}.log "$out"/schedule.json
now() { date +%s.%N; }
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT

# shellcheck disable=SC2086
"$LH" --bind "127.0.0.1:$port" $LIGHTHOUSE_FLAGS > "$out/lighthouse.log" 2>&1 &
lighthouse=$!; pids+=("$lighthouse")
peer=("$PY" bench/fault/torchft_peer.py --lighthouse "http://127.0.0.1:$port" "$@")

"${peer[@]}" --replica-id 0 --seconds 45 >> "$out/r0.jsonl" 2>> "$out/r0.log" &
r0=$!; pids+=("$r0")
"${peer[@]}" --replica-id 1 --seconds 60 >> "$out/r1.jsonl" 2>> "$out/r1.log" &
r1=$!; pids+=("$r1")

# Both training: each has committed a step (at most 60 s of waiting).
for _ in $(seq 600); do
  if grep -qs '"committed": true' "$out/r0.jsonl" && grep -qs '"committed": true' "$out/r1.jsonl"; then break; fi
  sleep 0.1
done
t_both=$(now)
load_start=$(cut -d' ' -f1 /proc/loadavg)
sleep 10
kill -9 "$r1"
t_kill=$(now)
wait "$r1" 2>/dev/null || true
sleep 5
t_restart=$(now)
"${peer[@]}" --replica-id 1 --seconds 20 >> "$out/r1.jsonl" 2>> "$out/r1.log" &
r1b=$!; pids+=("$r1b")
wait "$r1b" || echo "torchft_kill_run.sh: the restarted replica 1 exited with $?" >&2
wait "$r0" || echo "torchft_kill_run.sh: replica 0 exited with $?" >&2
kill "$lighthouse" 2>/dev/null || true
# The 1-minute load average when both trained and at the end: other work on the machine slows
# every step, so the numbers are read against it.
printf '{"both_training": %s, "kill": %s, "restart": %s, "killed": 1, "survivor": 0, "load_start": %s, "load_end": %s}\n' \
  "$t_both" "$t_kill" "$t_restart" "$load_start" "$(cut -d' ' -f1 /proc/loadavg)" > "$out/schedule.json"
"$PY" bench/fault/torchft_recovery.py "$out"
