#!/usr/bin/env bash
# examples/cifar10 at a small size on 2 ranks (Parallel, gloo): resume is exact, and the
# report is what was logged.
#   A  uninterrupted: 2 epochs of 4 iterations, a training checkpoint every 4 iterations;
#   B  --stop_iteration 6 (its last checkpoint is iteration 4), then C resumes from it;
#   D  --max_restarts 1 and one rank killed with SIGKILL once the checkpoint of iteration 4
#      exists: the failure names the rank, all ranks restart and resume by themselves.
# C's and D's final weights (and optimizer state) must equal A's bit for bit. A also records
# iterations 3 to 5 on a timeline (--timeline 3:5), which must change nothing it watches: its
# trace files are JSON, and its report, which must hold exactly the values of its scalars.jsonl
# and render non-blank in Chromium, pictures one step of both ranks.
# Usage: check_cifar10_resume.sh <cifar10> <python with torch> <tests/handlers/check_report.py>
set -euo pipefail
bin=$1 python=$2 check_report=$3
dir=$(mktemp -d /tmp/cifar10-resume-XXXXXX)
trap 'rm -rf "$dir"' EXIT
fail() { echo "check_cifar10_resume: $*"; exit 1; }
flags=(--nproc_per_node 2 --train_subset 256 --test_subset 128 --batch_size 64 --num_epochs 2
       --num_workers 1 --checkpoint_every 4 --validate_every 2 --log_every_iters 2)
run_folder() { ls -d "$1"/resnet18_backend-gloo-2_* | head -1; }

"$bin" "${flags[@]}" --output_path "$dir/a" --timeline 3:5 > "$dir/a.log" 2>&1 || { cat "$dir/a.log"; fail "run A failed"; }
a=$(run_folder "$dir/a")
for f in timeline.json timeline_rank_0.json timeline_rank_1.json; do
  "$python" -c "import json, sys; json.load(open(sys.argv[1]))" "$a/timeline/$f" || fail "run A's $f is not JSON"
done
grep -q "| 2 | " "$dir/a.log" || { cat "$dir/a.log"; fail "run A printed no results row for epoch 2"; }

"$bin" "${flags[@]}" --output_path "$dir/b" --stop_iteration 6 > "$dir/b.log" 2>&1 || { cat "$dir/b.log"; fail "run B failed"; }
grep -q "Stop training on iteration 6" "$dir/b.log" || { cat "$dir/b.log"; fail "run B did not stop at iteration 6"; }
b=$(run_folder "$dir/b")
[ -f "$b/training_checkpoint_4.pt" ] || { ls "$b"; fail "run B left no checkpoint of iteration 4"; }
"$bin" "${flags[@]}" --output_path "$dir/c" --resume_from "$b/training_checkpoint_4.pt" > "$dir/c.log" 2>&1 ||
  { cat "$dir/c.log"; fail "run C (resumed) failed"; }
grep -q "Resumed from $b/training_checkpoint_4.pt at iteration 4" "$dir/c.log" || { cat "$dir/c.log"; fail "run C did not resume at 4"; }
c=$(run_folder "$dir/c")

# D: --max_restarts 1, and one of the two ranks killed with SIGKILL as soon as the checkpoint
# of iteration 4 is on disk: Parallel names the rank, restarts both, and the restarted run
# resumes by itself from the run folder's last checkpoint and completes.
"$bin" "${flags[@]}" --output_path "$dir/d" --max_restarts 1 > "$dir/d.log" 2>&1 &
parent=$!
for _ in $(seq 1 1200); do
  ls "$dir"/d/*/training_checkpoint_4.pt > /dev/null 2>&1 && break
  sleep 0.05
done
victim=$(pgrep -P "$parent" | tail -1) || true
[ -n "$victim" ] || { cat "$dir/d.log"; fail "no rank process of run D to kill"; }
kill -9 "$victim"
wait "$parent" || { cat "$dir/d.log"; fail "run D did not complete after its restart"; }
grep -Eq "rank [01] .*killed by SIGKILL" "$dir/d.log" || { cat "$dir/d.log"; fail "run D's failure does not name the killed rank"; }
grep -q "restarting all 2 workers (restart 1 of 1)" "$dir/d.log" || { cat "$dir/d.log"; fail "run D did not restart"; }
grep -Eq "Resumed from .*/training_checkpoint_[48].pt at iteration [48]" "$dir/d.log" ||
  { cat "$dir/d.log"; fail "run D's restart did not resume from its checkpoint"; }
e=$(run_folder "$dir/d")

"$python" - "$a/training_checkpoint_8.pt" "$c/training_checkpoint_8.pt" "$e/training_checkpoint_8.pt" <<'EOF'
import sys, torch
def load(path):
    try:
        return torch.load(path, map_location="cpu", weights_only=False)
    except TypeError:  # torch < 1.13 has no weights_only
        return torch.load(path, map_location="cpu")
def flat(prefix, value, out):
    if isinstance(value, dict):
        for k, v in value.items():
            flat(prefix + "/" + str(k), v, out)
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            flat(prefix + "/" + str(i), v, out)
    else:
        out[prefix] = value
def state(path):
    c = load(path)
    out = {}
    flat("model", c["model"], out)
    flat("optimizer", c["optimizer"]["state"], out)
    return c["trainer"]["iteration"], out
it_a, a = state(sys.argv[1])
for other in sys.argv[2:]:
    it_o, o = state(other)
    assert it_a == it_o == 8, (it_a, it_o)
    assert a.keys() == o.keys(), sorted(set(a) ^ set(o))[:5]
    bad = [k for k in a if not (torch.equal(a[k], o[k]) if torch.is_tensor(a[k]) else a[k] == o[k])]
    assert not bad, "%s differs from the uninterrupted run in %d entries, e.g. %s" % (other, len(bad), bad[:3])
print("weights and optimizer state of %d resumed runs equal the uninterrupted run's (%d entries)" % (len(sys.argv) - 2, len(a)))
EOF

"$python" "$check_report" "$a/report.html" "$a/scalars.jsonl" --screenshot "$dir/report.png" --timeline-ranks 2 ||
  fail "the report of run A does not match its scalars.jsonl or renders blank"
echo "check_cifar10_resume: stop_iteration and kill -9 resumed exactly; the report matches the logged values"
