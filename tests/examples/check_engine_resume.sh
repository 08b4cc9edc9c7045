#!/usr/bin/env bash
# Runs engine_mnist for one epoch with training checkpoints every 20 iterations, then resumes
# a second run from the checkpoint of iteration 40 for two epochs, and checks: the resume
# point, both epochs' metrics over the whole test set, the checkpoints written after the
# resume, the best models and a TensorBoard event file. Usage: check_engine_resume.sh <engine_mnist>
set -euo pipefail
bin=$1
dir=$(mktemp -d /tmp/engine-resume-XXXXXX)
trap 'rm -rf "$dir"' EXIT
common=(--limit 6000 --output-path "$dir" --checkpoint-every 20)
first=$("$bin" --epochs 1 "${common[@]}" 2>&1) || { echo "$first"; echo "check_engine_resume: first run failed"; exit 1; }
echo "$first"
[ -f "$dir/training_checkpoint_40.pt" ] || { ls "$dir"; echo "check_engine_resume: no checkpoint of iteration 40"; exit 1; }
second=$("$bin" --epochs 2 "${common[@]}" --resume-from "$dir/training_checkpoint_40.pt" 2>&1) ||
  { echo "$second"; echo "check_engine_resume: resumed run failed"; exit 1; }
echo "$second"
grep -q "resuming from $dir/training_checkpoint_40.pt at iteration 40" <<<"$second" ||
  { echo "check_engine_resume: the resume point is not iteration 40"; exit 1; }
grep -Eq "^epoch 1: .*test accuracy 0\.[6-9][0-9]+, .*\(10000 samples\)" <<<"$first" ||
  { echo "check_engine_resume: the first epoch did not learn (test accuracy below 0.6 over the 10000 samples)"; exit 1; }
grep -Eq "^epoch 2: .*test accuracy 0\.[7-9][0-9]+, .*\(10000 samples\)" <<<"$second" ||
  { echo "check_engine_resume: no second epoch reaching 0.7 test accuracy over the 10000 samples"; exit 1; }
grep -q "last training checkpoint: $dir/training_checkpoint_80.pt" <<<"$second" ||
  { echo "check_engine_resume: expected the checkpoint of iteration 80 last"; exit 1; }
ls "$dir"/best_model_2_test_accuracy=*.pt >/dev/null || { echo "check_engine_resume: no best model of epoch 2"; exit 1; }
ls "$dir"/tb/events.out.tfevents.* >/dev/null || { echo "check_engine_resume: no TensorBoard file"; exit 1; }
echo "check_engine_resume: resumed at iteration 40 and finished epoch 2"
