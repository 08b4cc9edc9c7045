#!/usr/bin/env bash
# kindling's CIFAR10-tutorial program (examples/cifar10) against the same flow in Python PyTorch
# (bench/cifar10/train_torch.py: plain torch + DDP, no ignite): whole trainings, timed by the
# programs themselves, each writing summary.json. Per repeat, interleaved so that slow phases of
# this VM hit every variant alike:
#   python 1 rank | python 2 ranks (gloo) | kindling 1 rank | kindling 2 ranks gloo |
#   kindling 2 ranks mpi (mpirun) | no-communication limit: two independent 1-rank kindling
#   trainings started together, each with a rank's share of the 2-rank job (half the batch,
#   one loader worker, 1 intra-op thread via OMP_NUM_THREADS=1), samples/s added.
# Then a Markdown table of medians over the repeats: training samples/s of the whole job, epoch
# wall time (with the validation of every validate_every-th epoch), final test accuracy, peak RSS
# per rank (VmHWM of each rank's main process), and ratios kindling / python, mpi / no-comm, RSS.
# Usage: scripts/bench-cifar10.sh [repeats=3] [flags for both programs...]
#   e.g. scripts/bench-cifar10.sh 1 --num_epochs 1 --train_subset 4096 --test_subset 1024
# Default data: Fashion-MNIST (5 epochs); --data_path DIR with CIFAR-10's binary files for CIFAR-10.
# Needs a build (scripts/build.sh); without the kindling binary only the Python runs are made.
# Env: BUILD (build), KINDLING_CIFAR10 (the binary), TIMEOUT per run in s (14400), BENCH_DIR
# (where the runs' folders, logs and summaries stay; default a new /tmp/bench-cifar10.XXXXXX).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
REPEATS=${1:-3}
shift $(($# > 0 ? 1 : 0))
EXTRA=("$@")
# The no-communication limit runs each process with a 2-rank job's per-rank share: half the
# batch (auto_dataloader divides batch_size and num_workers by the ranks) and one worker.
BATCH=512 NOCOMM_EXTRA=()
for ((i = 0; i < ${#EXTRA[@]}; i++)); do
  case ${EXTRA[i]} in
    --batch_size) BATCH=${EXTRA[i + 1]}; i=$((i + 1)) ;;
    --num_workers) i=$((i + 1)) ;;
    *) NOCOMM_EXTRA+=("${EXTRA[i]}") ;;
  esac
done
NOCOMM_EXTRA+=(--batch_size $((BATCH / 2)) --num_workers 1)
BIN=${KINDLING_CIFAR10:-${BUILD:-build}/examples/cifar10/cifar10}
PY=(/usr/bin/python3 bench/cifar10/train_torch.py)
TIMEOUT=${TIMEOUT:-14400}
ROOT=${BENCH_DIR:-$(mktemp -d /tmp/bench-cifar10.XXXXXX)}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1  # mpirun refuses root otherwise

HAVE_KINDLING=1
if [[ ! -x $BIN ]]; then
  echo "# warning: $BIN not found (build examples/cifar10 first); running the Python variants only" >&2
  HAVE_KINDLING=0
fi

# timeout puts each training in a process group of its own, out of reach of Ctrl-C: pass it on.
CHILDREN=()
trap 'kill "${CHILDREN[@]}" 2>/dev/null; exit 130' INT TERM

run() {  # label dir command... : one training, its output in dir/log.txt
  local label=$1 dir=$2 start=$SECONDS rc
  shift 2
  mkdir -p "$dir"
  timeout "$TIMEOUT" "$@" >"$dir/log.txt" 2>&1 &
  CHILDREN=($!)
  wait "$!"
  rc=$?
  echo "[$label] rc=$rc, $((SECONDS - start)) s, log $dir/log.txt"
}

no_comm() {  # dir: two 1-rank kindling trainings at once, one intra-op thread each
  local dir=$1 start=$SECONDS rcs=()
  CHILDREN=()
  for k in a b; do
    mkdir -p "$dir/$k"
    OMP_NUM_THREADS=1 timeout "$TIMEOUT" "$BIN" --nproc_per_node 1 --output_path "$dir/$k" "${NOCOMM_EXTRA[@]}" \
      >"$dir/$k/log.txt" 2>&1 &
    CHILDREN+=($!)
  done
  for p in "${CHILDREN[@]}"; do wait "$p"; rcs+=($?); done
  echo "[kindling-nocomm] rc=${rcs[*]}, $((SECONDS - start)) s, logs $dir/{a,b}/log.txt"
}

echo "# machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo "# flags: ${EXTRA[*]:-(defaults)}; runs under $ROOT"
for ((r = 1; r <= REPEATS; r++)); do
  echo "# repeat $r/$REPEATS"
  d=$ROOT/r$r
  run python-1 "$d/python-1" "${PY[@]}" --nproc_per_node 1 --output_path "$d/python-1" "${EXTRA[@]}"
  run python-2 "$d/python-2" "${PY[@]}" --nproc_per_node 2 --backend gloo --output_path "$d/python-2" "${EXTRA[@]}"
  ((HAVE_KINDLING)) || continue
  run kindling-1 "$d/kindling-1" "$BIN" --nproc_per_node 1 --output_path "$d/kindling-1" "${EXTRA[@]}"
  run kindling-gloo-2 "$d/kindling-gloo-2" \
    "$BIN" --nproc_per_node 2 --backend gloo --output_path "$d/kindling-gloo-2" "${EXTRA[@]}"
  # --bind-to none: mpirun would pin each rank (and its loader threads) to one core; the other
  # variants are not pinned, so neither is this one.
  run kindling-mpi-2 "$d/kindling-mpi-2" mpirun -np 2 --oversubscribe --bind-to none \
    "$BIN" --backend mpi --output_path "$d/kindling-mpi-2" "${EXTRA[@]}"
  no_comm "$d/kindling-nocomm"
done

/usr/bin/python3 - "$ROOT" "$REPEATS" <<'EOF'
import glob, json, os, statistics, sys
root, repeats = sys.argv[1], int(sys.argv[2])
LABELS = [("python-1", "Python", 1), ("python-2", "Python, gloo", 2), ("kindling-1", "kindling", 1),
          ("kindling-gloo-2", "kindling, gloo", 2), ("kindling-mpi-2", "kindling, mpi", 2),
          ("kindling-nocomm", "no-comm limit: 2 x kindling 1 rank", 2)]

def steady(xs):  # as the programs do for samples/s: leave out the first epoch when there are >= 3
    return statistics.median(xs[1:] if len(xs) >= 3 else xs)

def one_run(folder):
    """(samples/s, epoch s, test accuracy, RSS per rank) of one run, or None when it left no summary."""
    found = sorted(glob.glob(os.path.join(folder, "**", "summary.json"), recursive=True))
    want = 2 if folder.endswith("nocomm") else 1  # the no-comm pair: one summary per training
    if len(found) != want:
        return None
    s = [json.load(open(f)) for f in found]
    return (sum(x["train_samples_per_s"] for x in s), max(steady(x["epoch_seconds"]) for x in s),
            statistics.mean(x["test_accuracy"] for x in s),
            statistics.mean(v for x in s for v in x["peak_rss_mb"]))

runs = {}
print("\n| repeat | variant | samples/s | epoch s | test acc | peak RSS/rank MiB |\n|---|---|---|---|---|---|")
for r in range(1, repeats + 1):
    for label, _, _ in LABELS:
        folder = os.path.join(root, f"r{r}", label)
        if not os.path.isdir(folder):
            continue
        res = one_run(folder)
        if res:
            runs.setdefault(label, []).append(res)
        cells = " | ".join(f"{v:,.4g}" for v in res) if res else "failed | - | - | -"
        print(f"| {r} | {label} | {cells} |")

med = {k: [statistics.median(x[i] for x in v) for i in range(4)] for k, v in runs.items()}
print(f"\n## Medians over the repeats\n\n| variant | ranks | samples/s | epoch s | test acc | peak RSS/rank MiB | runs |")
print("|---|---|---|---|---|---|---|")
for label, name, n in LABELS:
    if label in med:
        sps, ep, acc, rss = med[label]
        print(f"| {name} | {n} | {sps:,.1f} | {ep:,.1f} | {acc:.4f} | {rss:,.0f} | {len(runs[label])}/{repeats} |")

def ratio(a, b, i):
    return f"{med[a][i] / med[b][i]:.2f}" if a in med and b in med and med[b][i] else "-"
print("\n| comparison | samples/s ratio | epoch time ratio | RSS/rank ratio |\n|---|---|---|---|")
for a, b, what in [("kindling-1", "python-1", "kindling 1 rank / Python 1 rank"),
                   ("kindling-gloo-2", "python-2", "kindling gloo 2 ranks / Python gloo 2 ranks"),
                   ("kindling-mpi-2", "python-2", "kindling mpi 2 ranks / Python gloo 2 ranks"),
                   ("kindling-gloo-2", "kindling-nocomm", "kindling gloo 2 ranks / no-comm limit"),
                   ("kindling-mpi-2", "kindling-nocomm", "kindling mpi 2 ranks / no-comm limit")]:
    print(f"| {what} | {ratio(a, b, 0)} | {ratio(a, b, 1)} | {ratio(a, b, 3)} |")
print("\nsamples/s: whole job, epoch start to its last training iteration, median over epochs (the first left"
      "\n  out when >= 3);"
      "\nepoch s: wall time per epoch (validation every validate_every epochs), same median (no-comm: the slower);"
      f"\nratios > 1 mean more samples/s, longer epochs or more memory for the first. Runs kept in {root}")
EOF
