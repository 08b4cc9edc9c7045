#!/usr/bin/env bash
# kindling programs under the real horovodrun (Horovod 0.28.1, scripts/horovod-env.sh):
#  1. hello_dist on 2 local slots with Horovod's gloo launcher: both ranks read their place
#     from HOROVOD_RANK/_SIZE/_LOCAL_RANK, find the rendezvous beside Horovod's and agree on
#     the all_reduce (1 + 2 = 3);
#  2. the same under horovodrun --mpi (horovodrun starts mpirun: Open MPI's variables win);
#  3. a rank that fails: horovodrun exits non-zero and the rank's message reaches the output.
# Exit 77 (skipped, the reason printed) where scripts/horovod-env.sh has not made Horovod's venv.
# Usage: horovodrun_test.sh path/to/hello_dist
set -uo pipefail
HELLO=${1:?usage: horovodrun_test.sh path/to/hello_dist}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
REQ=$ROOT/scripts/requirements-horovod.txt
VENV=${KINDLING_HOROVOD_VENV:-$HOME/.cache/kindling/horovod-$(sed -n 's/^horovod==//p' "$REQ")-torch1.13}
if [[ ! -x $VENV/bin/horovodrun ]] || ! cmp -s "$REQ" "$VENV/pinned.txt"; then
  echo "SKIPPED: no Horovod venv at $VENV matching $REQ; make it with scripts/horovod-env.sh (about 15 min, once)"
  exit 77
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fail=0
check() {  # name, expected exit (0 or "nonzero"), least count of pattern, pattern, command...
  local name=$1 want=$2 count=$3 pattern=$4; shift 4
  local out code
  out=$(timeout 120 "$@" 2>&1); code=$?
  local seen; seen=$(grep -c -- "$pattern" <<<"$out")
  if { [[ $want == 0 && $code != 0 ]] || [[ $want == nonzero && $code == 0 ]]; } || ((seen < count)); then
    echo "FAIL $name: exit $code (want $want), '$pattern' seen $seen times (want at least $count):"
    echo "$out" | tail -40
    fail=1
  else
    echo "ok $name"
  fi
}
check gloo 0 2 "world_size=2 backend=gloo all_reduce=3 nnodes=1" \
  "$VENV/bin/horovodrun" -np 2 -H localhost:2 --gloo "$HELLO" --layout
check mpi 0 2 "world_size=2 backend=gloo all_reduce=3 nnodes=1" \
  "$VENV/bin/horovodrun" -np 2 -H localhost:2 --mpi --mpi-args="--oversubscribe" "$HELLO" --layout
check failing-rank nonzero 1 "unknown or unavailable backend 'nope'" \
  "$VENV/bin/horovodrun" -np 2 -H localhost:2 --gloo "$HELLO" --backend nope
exit $fail
