#!/usr/bin/env bash
# Runs dist_tutorial's synchronous SGD briefly and checks that it learned: every rank's loss
# falls from the first epoch to the last, replicas are identical, and test accuracy is
# printed. Usage: check_train.sh <dist_tutorial> [extra dist_tutorial arguments]
set -euo pipefail
bin=$1
shift
out=$("$bin" train --epochs 3 --limit 3000 "$@" 2>&1) || { echo "$out"; echo "check_train: dist_tutorial failed"; exit 1; }
echo "$out"
grep -q "parameters identical on all 2 ranks" <<<"$out" || { echo "check_train: no replica check"; exit 1; }
grep -q "test accuracy" <<<"$out" || { echo "check_train: no test accuracy"; exit 1; }
for r in 0 1; do
  first=$(sed -n "s/^Rank $r, epoch 0: loss //p" <<<"$out")
  last=$(sed -n "s/^Rank $r, epoch 2: loss //p" <<<"$out")
  [ -n "$first" ] && [ -n "$last" ] || { echo "check_train: rank $r printed no epoch losses"; exit 1; }
  awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a) }' ||
    { echo "check_train: rank $r loss did not fall ($first -> $last)"; exit 1; }
  echo "check_train: rank $r loss $first -> $last"
done
