#!/usr/bin/env bash
# examples/cifar10 when jobs share an output folder, as sweeps, job arrays and restarts do:
#   A  run folders are made exclusively: a name taken (by another job in the same second)
#      gets a suffix, and two jobs started together get two folders, each its own checkpoints;
#   B  a restarted job continues in its own folder even when another job of the same
#      settings made a newer one meanwhile, resumes its own checkpoint, and n_saved counts
#      the files of both attempts;
#   C  TORCHELASTIC_RESTART_COUNT left in a shell does not make a plain run continue an old one;
#   D  a --resume_from that cannot be read leaves no run folder behind;
#   E  exit codes as kindling-run's: 128 + 9 for a worker killed by SIGKILL, 128 + 2 for Ctrl-C;
#   F  two jobs given one --rdzv_id (one finished, one running) under kindling-run: a third
#      whose first attempt fails restarts in a folder of its own and trains, never resuming
#      the others' checkpoints or writing into their folders;
#   I  a --resume_from with 64 KiB of garbage a third of the way in, or over its first zip
#      header, is refused as damaged, naming the file;
#   J  1 MiB of garbage inside the newest checkpoint of a running job, then a rank killed:
#      the restart warns, resumes from the previous checkpoint and completes;
#   K  a run that TerminateOnNan ends right after a resume fails (no "succeeded", no table).
# Usage: check_cifar10_jobs.sh <cifar10> <kindling-run>
set -euo pipefail
bin=$1
launcher=$2
dir=$(mktemp -d /tmp/cifar10-jobs-XXXXXX)
cleanup() {
  pkill -CONT -f "$dir" 2>/dev/null || true
  pkill -KILL -f "$dir" 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT
fail() { echo "check_cifar10_jobs: $*"; exit 1; }
show() { for f in "$@"; do echo "== $f"; tail -30 "$f"; done; }
wait_for() {  # wait_for <glob>: up to 60 s for a file to exist
  for _ in $(seq 1 1200); do
    compgen -G "$1" > /dev/null && return 0
    sleep 0.05
  done
  return 1
}
base=(--test_subset 64 --batch_size 32 --num_epochs 1 --num_workers 0 --log_every_iters 0)
small=("${base[@]}" --train_subset 256)

# A: the names of this minute are taken (as by jobs started in the same second); two jobs
# start together.
out="$dir/a"
mkdir -p "$out"
now=$(date +%s)
for s in $(seq 0 59); do mkdir -p "$out/resnet18_backend-none-1_$(date -d "@$((now + s))" +%Y%m%d-%H%M%S)"; done
"$bin" "${small[@]}" --checkpoint_every 4 --output_path "$out" --seed 1 > "$dir/a1.log" 2>&1 &
first=$!
"$bin" "${small[@]}" --checkpoint_every 4 --output_path "$out" --seed 2 > "$dir/a2.log" 2>&1 || { show "$dir/a2.log"; fail "job A2 failed"; }
wait "$first" || { show "$dir/a1.log"; fail "job A1 failed"; }
f1=$(sed -n 's/.*Output path: //p' "$dir/a1.log") f2=$(sed -n 's/.*Output path: //p' "$dir/a2.log")
[ -n "$f1" ] && [ -n "$f2" ] && [ "$f1" != "$f2" ] || { show "$dir/a1.log" "$dir/a2.log"; fail "jobs A1 and A2 share a run folder ('$f1', '$f2')"; }
for f in "$f1" "$f2"; do
  case "$f" in *-[0-9]) ;; *) fail "run folder $f does not carry the suffix of a taken name";; esac
done
grep -q "Last training checkpoint: $f1/training_checkpoint_8.pt" "$dir/a1.log" || { show "$dir/a1.log"; fail "A1's checkpoint is not in its own folder"; }
grep -q "Last training checkpoint: $f2/training_checkpoint_8.pt" "$dir/a2.log" || { show "$dir/a2.log"; fail "A2's checkpoint is not in its own folder"; }
[ "$(ls "$f1"/*.tfevents.* | wc -l)" = 1 ] && [ "$(ls "$f2"/*.tfevents.* | wc -l)" = 1 ] || fail "TensorBoard files of A1 and A2 are mixed"

# B: job R (2 ranks, one restart allowed) is frozen after its checkpoint of iteration 4;
# job S with the same settings runs to its end meanwhile (the newest folder is now S's);
# then one of R's ranks is killed and R restarts.
out="$dir/b"
flags=("${base[@]}" --train_subset 1024 --nproc_per_node 2 --checkpoint_every 4)
"$bin" "${flags[@]}" --output_path "$out" --seed 1 --max_restarts 1 > "$dir/r.log" 2>&1 &
parent=$!
wait_for "$out/*/training_checkpoint_4.pt" || { show "$dir/r.log"; fail "job R wrote no checkpoint of iteration 4"; }
r_folder=$(sed -n 's/.*Output path: //p' "$dir/r.log")
ranks=$(pgrep -P "$parent") || true
[ "$(echo "$ranks" | wc -w)" = 2 ] || { show "$dir/r.log"; fail "job R does not have 2 rank processes ($ranks)"; }
kill -STOP $ranks
sleep 1.1  # S's folder gets a later name and time than R's
"$bin" "${flags[@]}" --output_path "$out" --seed 2 > "$dir/s.log" 2>&1 || { kill -CONT $ranks; show "$dir/s.log"; fail "job S failed"; }
s_folder=$(sed -n 's/.*Output path: //p' "$dir/s.log")
s_files=$(ls "$s_folder")
victim=$(echo "$ranks" | tail -1)
kill -KILL "$victim"
kill -CONT $ranks 2> /dev/null || true
wait "$parent" || { show "$dir/r.log"; fail "job R did not complete after its restart"; }
grep -q "restarting all 2 workers (restart 1 of 1)" "$dir/r.log" || { show "$dir/r.log"; fail "job R did not restart"; }
grep -q "Restart 1: continuing in $r_folder\$" "$dir/r.log" || { show "$dir/r.log"; fail "job R did not continue in its own folder $r_folder (S made $s_folder)"; }
grep -Eq "Resumed from $r_folder/training_checkpoint_[0-9]+.pt at iteration [0-9]+" "$dir/r.log" ||
  { show "$dir/r.log"; fail "job R did not resume its own checkpoint"; }
[ "$s_files" = "$(ls "$s_folder")" ] || fail "job R wrote into job S's folder $s_folder"
kept=$(ls "$r_folder"/training_checkpoint_*.pt | xargs -n1 basename | tr '\n' ' ')
[ "$kept" = "training_checkpoint_28.pt training_checkpoint_32.pt " ] ||
  fail "n_saved=2 over both attempts should keep iterations 28 and 32 in $r_folder; kept: $kept"

# C: a restart count left in the shell.
TORCHELASTIC_RESTART_COUNT=1 "$bin" "${small[@]}" --output_path "$out" > "$dir/c.log" 2>&1 || { show "$dir/c.log"; fail "run C failed"; }
grep -q "TORCHELASTIC_RESTART_COUNT=1 is set but no restarting launcher" "$dir/c.log" || { show "$dir/c.log"; fail "run C gave no warning"; }
if grep -q "Resumed from\|continuing in" "$dir/c.log"; then show "$dir/c.log"; fail "run C continued an old run"; fi

# D: a checkpoint that cannot be read, and no folder left behind.
before=$(ls "$out" | wc -l)
echo "not a checkpoint" > "$dir/garbage.pt"
if "$bin" "${small[@]}" --output_path "$out" --resume_from "$dir/garbage.pt" > "$dir/d.log" 2>&1; then fail "run D succeeded"; fi
[ "$(ls "$out" | wc -l)" = "$before" ] || { ls "$out"; fail "run D left a run folder behind"; }

# E: exit codes of a Parallel job: a rank killed by SIGKILL, then Ctrl-C to the launching process.
out="$dir/e"
"$bin" "${flags[@]}" --output_path "$out/kill" > "$dir/e1.log" 2>&1 &
parent=$!
wait_for "$out/kill/*/training_checkpoint_4.pt" || { show "$dir/e1.log"; fail "run E1 wrote no checkpoint"; }
kill -KILL "$(pgrep -P "$parent" | tail -1)"
code=0; wait "$parent" || code=$?
[ "$code" = 137 ] || { show "$dir/e1.log"; fail "a rank killed by SIGKILL should end the job with 137, got $code"; }
"$bin" "${flags[@]}" --output_path "$out/int" > "$dir/e2.log" 2>&1 &
parent=$!
wait_for "$out/int/*/training_checkpoint_4.pt" || { show "$dir/e2.log"; fail "run E2 wrote no checkpoint"; }
kill -INT "$parent"
code=0; wait "$parent" || code=$?
[ "$code" = 130 ] || { show "$dir/e2.log"; fail "Ctrl-C should end the job with 130, got $code"; }
# F: job7 runs to its end; another job7 (G) is running, frozen; a third job7 (H) fails in its
# first attempt (before it makes a folder) and restarts.
out="$dir/f"
job7=("$launcher" --standalone --nproc_per_node 1 --rdzv_id job7)
"${job7[@]}" "$bin" "${small[@]}" --checkpoint_every 4 --output_path "$out" > "$dir/f1.log" 2>&1 || { show "$dir/f1.log"; fail "job F1 failed"; }
f1=$(sed -n 's/.*Output path: //p' "$dir/f1.log")
"${job7[@]}" "$bin" "${base[@]}" --train_subset 1024 --checkpoint_every 4 --output_path "$out" > "$dir/g.log" 2>&1 &
parent=$!
for _ in $(seq 1 1200); do g=$(sed -n 's/.*Output path: //p' "$dir/g.log"); [ -n "$g" ] && break; sleep 0.05; done
wait_for "$g/training_checkpoint_4.pt" || { show "$dir/g.log"; fail "job G wrote no checkpoint of iteration 4"; }
g_rank=$(pgrep -P "$parent")
kill -STOP $g_rank
g_files=$(ls "$g")
printf '#!/bin/sh\n[ "$TORCHELASTIC_RESTART_COUNT" = 0 ] && { echo "first attempt fails on purpose" >&2; exit 3; }\nexec "$@"\n' > "$dir/first-fails.sh"
chmod +x "$dir/first-fails.sh"
"${job7[@]}" --max_restarts 1 "$dir/first-fails.sh" "$bin" "${small[@]}" --checkpoint_every 4 --output_path "$out" > "$dir/h.log" 2>&1 ||
  { kill -CONT $g_rank; show "$dir/h.log"; fail "job H failed"; }
h=$(sed -n 's/.*Output path: //p' "$dir/h.log")
[ -n "$h" ] && [ "$h" != "$f1" ] && [ "$h" != "$g" ] || { kill -CONT $g_rank; show "$dir/h.log"; fail "job H continued another job7's folder ($h; F1 $f1, G $g)"; }
if grep -q "Resumed from" "$dir/h.log"; then kill -CONT $g_rank; show "$dir/h.log"; fail "job H resumed another job's checkpoint"; fi
grep -q "Last training checkpoint: $h/training_checkpoint_8.pt" "$dir/h.log" || { kill -CONT $g_rank; show "$dir/h.log"; fail "job H did not train in its own folder"; }
[ "$g_files" = "$(ls "$g")" ] || { kill -CONT $g_rank; fail "job H wrote into job G's folder $g"; }
kill -CONT $g_rank
wait "$parent" || { show "$dir/g.log"; fail "job G failed after job H ran beside it"; }

# I: damaged checkpoints given to --resume_from.
garbage() {  # garbage <file> <offset> <KiB>: random bytes written over the file, its size kept
  dd if=/dev/urandom of="$1" bs=1024 count="$3" seek="$(($2 / 1024))" conv=notrunc status=none
}
size_of() { stat -c %s "$1"; }
for where in third header; do
  damaged="$dir/damaged-$where.pt"
  cp "$f1/training_checkpoint_8.pt" "$damaged"
  if [ "$where" = third ]; then garbage "$damaged" "$(($(size_of "$damaged") / 3))" 64; else garbage "$damaged" 0 1; fi
  if "$bin" "${small[@]}" --output_path "$dir/i" --resume_from "$damaged" > "$dir/i.log" 2>&1; then
    show "$dir/i.log"; fail "run I ($where) resumed from a damaged checkpoint"
  fi
  grep -q "'$damaged' ([0-9]* bytes) is damaged: " "$dir/i.log" || { show "$dir/i.log"; fail "run I ($where) does not call $damaged damaged"; }
  if grep -q "Resumed from\|training samples/s\|pickle LibTorch's reader" "$dir/i.log"; then show "$dir/i.log"; fail "run I ($where) resumed or blamed pickles"; fi
done

# J: under kindling-run, the ranks frozen once the checkpoint of iteration 8 is on disk, 1 MiB
# of garbage written inside the newest checkpoint, then one rank killed.
out="$dir/j"
"$launcher" --standalone --nproc_per_node 2 --max_restarts 1 "$bin" "${base[@]}" --train_subset 1024 \
  --checkpoint_every 4 --output_path "$out" > "$dir/j.log" 2>&1 &
parent=$!
wait_for "$out/*/training_checkpoint_8.pt" || { show "$dir/j.log"; fail "job J wrote no checkpoint of iteration 8"; }
ranks=$(pgrep -P "$parent") || true
kill -STOP $ranks
newest=$(ls -t "$out"/*/training_checkpoint_*.pt | head -1) previous=$(ls -t "$out"/*/training_checkpoint_*.pt | sed -n 2p)
garbage "$newest" "$(($(size_of "$newest") / 2))" 1024
kill -KILL "$(echo "$ranks" | tail -1)"
kill -CONT $ranks 2> /dev/null || true
wait "$parent" || { show "$dir/j.log"; fail "job J did not complete after its restart"; }
grep -q "resuming from '$previous', the newest intact checkpoint; skipped as damaged: '$newest' (the CRC-32 of" "$dir/j.log" ||
  { show "$dir/j.log"; fail "job J's restart gave no warning naming $newest as damaged"; }
grep -q "Resumed from $previous at iteration" "$dir/j.log" || { show "$dir/j.log"; fail "job J did not resume from $previous"; }
if grep -q "TerminateOnNan" "$dir/j.log"; then show "$dir/j.log"; fail "job J's loss went NaN"; fi

# K: a checkpoint whose weights make the next loss NaN (one step at a learning rate of 1e30),
# resumed under kindling-run: TerminateOnNan ends the run at once, every attempt.
"$bin" "${small[@]}" --learning_rate 1e30 --num_warmup_epochs 0 --checkpoint_every 1 --stop_iteration 1 \
  --output_path "$dir/k" > "$dir/k1.log" 2>&1 || { show "$dir/k1.log"; fail "run K1 failed"; }
broken=$(ls "$dir"/k/*/training_checkpoint_1.pt)
code=0
"$launcher" --standalone --nproc_per_node 1 --max_restarts 1 "$bin" "${small[@]}" --output_path "$dir/k" \
  --resume_from "$broken" > "$dir/k2.log" 2>&1 || code=$?
[ "$code" != 0 ] || { show "$dir/k2.log"; fail "a run TerminateOnNan ended exited with 0"; }
grep -q "TerminateOnNan stopped the training at iteration 2: .* it resumed from $broken at iteration 1" "$dir/k2.log" ||
  { show "$dir/k2.log"; fail "run K2 does not say that TerminateOnNan stopped it after its resume"; }
if grep -q "succeeded\|training samples/s\|| epoch | train accuracy" "$dir/k2.log"; then show "$dir/k2.log"; fail "run K2 reported success or results"; fi

echo "check_cifar10_jobs: unique run folders, restarts continue their own run, stale variables ignored, no empty folders, kindling-run's exit codes, one --rdzv_id for several jobs, damaged checkpoints refused or skipped, a NaN stop is a failure"
