#!/usr/bin/env bash
# kindling's CIFAR10-tutorial program (examples/cifar10) against its Python peers: the real
# PyTorch-Ignite running the tutorial's flow (bench/cifar10/train_ignite.py, ignite and TensorBoard
# from scripts/python-peer.sh) and the same flow in plain torch (bench/cifar10/train_torch.py):
# whole trainings, timed by the programs themselves, each writing summary.json; every run's peak
# memory, worker processes included, is sampled from outside (bench/cifar10/peak_memory.py, PSS).
# Per repeat, interleaved so that slow phases of this VM hit every variant alike, the variants of
# $VARIANTS in this order (default: all):
#   ignite-1 | ignite-2 (torchrun, gloo) | python-1 | python-2 (gloo) | kindling-1 |
#   kindling-gloo-2 | kindling-mpi-2 (mpirun) | nocomm: two independent 1-rank kindling
#   trainings started together, each with a rank's share of the 2-rank job (half the batch, one
#   loader worker, 1 intra-op thread via OMP_NUM_THREADS=1), samples/s added.
# Every variant shares the machine's cores among its ranks (1 intra-op thread per rank at 2 ranks).
# Then a Markdown table of medians over the repeats: training samples/s of the whole job, epoch
# wall time (with the validation of every validate_every-th epoch), final test accuracy, peak
# memory per rank (PSS of the rank and its workers) and ratios kindling / ignite, kindling / python.
# Usage: scripts/bench-cifar10.sh [repeats=3] [flags for every program...]
#   e.g. scripts/bench-cifar10.sh 1 --num_epochs 1 --train_subset 4096 --test_subset 1024
#   VARIANTS="ignite-1 ignite-2 kindling-1 kindling-gloo-2" scripts/bench-cifar10.sh 3  # the main job
# Default data: Fashion-MNIST (3 epochs); --data_path DIR with CIFAR-10's binary files for CIFAR-10.
# Needs a build (scripts/build.sh); without the kindling binary only the Python runs are made.
# Env: KINDLING_LIBTORCH (debian: LibTorch 1.13 against ignite 0.4.13 on Debian's torch; pip:
# LibTorch 2.15 against ignite 0.5.5 on the venv's torch 2.15), BUILD (that LibTorch's build
# folder), KINDLING_CIFAR10 (the binary), TIMEOUT per run in s (14400), MEMORY_EVERY
# (seconds between memory samples, 1; each costs CPU, see peak_memory.py), BENCH_DIR
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
source scripts/libtorch-choice.sh || exit 1
BUILD=${BUILD:-$(build_dir_of "${KINDLING_LIBTORCH:-debian}")} || exit 1
TORCH_PY=$(torch_python_of "${KINDLING_LIBTORCH:-debian}") || exit 1
BIN=${KINDLING_CIFAR10:-$BUILD/examples/cifar10/cifar10}
VARIANTS=${VARIANTS:-ignite-1 ignite-2 python-1 python-2 kindling-1 kindling-gloo-2 kindling-mpi-2 nocomm}
PEER=$(scripts/python-peer.sh "$TORCH_PY") || exit 1
PY=("$PEER" bench/cifar10/train_torch.py)
IGNITE=("$PEER" bench/cifar10/train_ignite.py)
# Debian's torchrun fails on Python 3.11 before starting a worker; the wrapper fixes that and runs it.
TORCHRUN=("$PEER" tests/launch/torchrun_compat.py --standalone --nproc_per_node 2)
TIMEOUT=${TIMEOUT:-14400}
MEMORY=(/usr/bin/python3 bench/cifar10/peak_memory.py --every "${MEMORY_EVERY:-1}")
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

run() {  # label ranks dir command... : one training, its output in dir/log.txt, its memory in dir/memory.json
  local label=$1 ranks=$2 dir=$3 start=$SECONDS rc
  shift 3
  mkdir -p "$dir"
  timeout "$TIMEOUT" "${MEMORY[@]}" --ranks "$ranks" --out "$dir/memory.json" -- \
    "$@" >"$dir/log.txt" 2>&1 &
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
    OMP_NUM_THREADS=1 timeout "$TIMEOUT" "${MEMORY[@]}" --out "$dir/$k/memory.json" -- \
      "$BIN" --nproc_per_node 1 --output_path "$dir/$k" "${NOCOMM_EXTRA[@]}" \
      >"$dir/$k/log.txt" 2>&1 &
    CHILDREN+=($!)
  done
  for p in "${CHILDREN[@]}"; do wait "$p"; rcs+=($?); done
  echo "[kindling-nocomm] rc=${rcs[*]}, $((SECONDS - start)) s, logs $dir/{a,b}/log.txt"
}

echo "# machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo "# flags: ${EXTRA[*]:-(defaults)}; runs under $ROOT"
wanted() { [[ " $VARIANTS " == *" $1 "* ]]; }
for ((r = 1; r <= REPEATS; r++)); do
  echo "# repeat $r/$REPEATS"
  d=$ROOT/r$r
  if wanted ignite-1; then run ignite-1 1 "$d/ignite-1" "${IGNITE[@]}" --output_path "$d/ignite-1" "${EXTRA[@]}"; fi
  if wanted ignite-2; then
    run ignite-2 2 "$d/ignite-2" "${TORCHRUN[@]}" "${IGNITE[@]:1}" --backend gloo --output_path "$d/ignite-2" "${EXTRA[@]}"
  fi
  if wanted python-1; then run python-1 1 "$d/python-1" "${PY[@]}" --nproc_per_node 1 --output_path "$d/python-1" "${EXTRA[@]}"; fi
  if wanted python-2; then
    run python-2 2 "$d/python-2" "${PY[@]}" --nproc_per_node 2 --backend gloo --output_path "$d/python-2" "${EXTRA[@]}"
  fi
  ((HAVE_KINDLING)) || continue
  if wanted kindling-1; then
    run kindling-1 1 "$d/kindling-1" "$BIN" --nproc_per_node 1 --output_path "$d/kindling-1" "${EXTRA[@]}"
  fi
  if wanted kindling-gloo-2; then
    run kindling-gloo-2 2 "$d/kindling-gloo-2" \
      "$BIN" --nproc_per_node 2 --backend gloo --output_path "$d/kindling-gloo-2" "${EXTRA[@]}"
  fi
  # --bind-to none: mpirun would pin each rank (and its loader threads) to one core; the other
  # variants are not pinned, so neither is this one.
  if wanted kindling-mpi-2; then
    run kindling-mpi-2 2 "$d/kindling-mpi-2" mpirun -np 2 --oversubscribe --bind-to none \
      "$BIN" --backend mpi --output_path "$d/kindling-mpi-2" "${EXTRA[@]}"
  fi
  if wanted nocomm; then no_comm "$d/kindling-nocomm"; fi
done

/usr/bin/python3 bench/cifar10/report.py "$ROOT" "$REPEATS"
