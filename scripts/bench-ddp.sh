#!/usr/bin/env bash
# kindling DDP vs Python torch.nn.parallel.DistributedDataParallel, same run: samples/s of a
# training step (bench/ddp/main.cpp and bench/ddp/ddp_python.py: same model, batch, threads
# and Fashion-MNIST data), 1 and 2 ranks, repeats interleaved, medians reported; then the
# loader alone. Usage: scripts/bench-ddp.sh [repeats] (default 3). Needs a build (scripts/build.sh);
# KINDLING_LIBTORCH=pip measures the LibTorch 2.15 build against the Python torch 2.15 of its venv.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/libtorch-choice.sh
BUILD=${BUILD:-$(build_dir_of "${KINDLING_LIBTORCH:-debian}")}
ensure_benchmarks "$BUILD"
TORCH_PY=$(torch_python_of "${KINDLING_LIBTORCH:-debian}")
REPEATS=${1:-3}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
RUN="$BUILD/kindling-run"
BENCH="$BUILD/bench/ddp/bench_ddp"
PY="$TORCH_PY bench/ddp/ddp_python.py"
OUT=$(mktemp)
trap 'rm -f "$OUT"' EXIT

declare -A ARGS=([mlp]="--model mlp --batch 64 --steps 200 --warmup 10"
                 [resnet18]="--model resnet18 --batch 32 --steps 20 --warmup 3")

one() {  # impl model ranks
  local impl=$1 model=$2 n=$3 line
  case $impl in
    kindling-gloo) line=$(timeout 300 "$RUN" --nproc_per_node "$n" "$BENCH" ${ARGS[$model]} --backend gloo 2>&1 | grep RESULT) ;;
    kindling-mpi) line=$(timeout 300 mpirun --oversubscribe -np "$n" "$BENCH" ${ARGS[$model]} --backend mpi 2>&1 | grep RESULT) ;;
    python-gloo) line=$(timeout 300 "$RUN" --nproc_per_node "$n" $PY ${ARGS[$model]} 2>&1 | grep RESULT) ;;
  esac
  local rate=${line##*samples_per_s=}
  echo "$impl $model $n $rate" | tee -a "$OUT"
}

echo "# machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); 1 thread per rank"
for r in $(seq "$REPEATS"); do
  for model in mlp resnet18; do
    one python-gloo "$model" 1
    one kindling-gloo "$model" 1
    for impl in python-gloo kindling-gloo kindling-mpi; do one "$impl" "$model" 2; done
  done
done

python3 - "$OUT" <<'EOF'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    impl, model, n, rate = line.split()
    runs.setdefault((impl, model, int(n)), []).append(float(rate))
med = {k: statistics.median(v) for k, v in runs.items()}
print("\n| model | ranks | Python DDP (gloo) | kindling (gloo) | ratio | kindling (mpi) | ratio | scaling eff. kindling gloo / mpi / Python |")
print("|---|---|---|---|---|---|---|---|")
for model in ("mlp", "resnet18"):
    for n in (1, 2):
        py, kg, km = med.get(("python-gloo", model, n)), med.get(("kindling-gloo", model, n)), med.get(("kindling-mpi", model, n))
        cell = lambda v: f"{v:,.0f}" if v else "-"
        ratio = lambda v: f"{v / py:.2f}x" if v and py else "-"
        eff = "-"
        if n == 2:
            e = lambda v, one: f"{v / (2 * one):.2f}" if v and one else "-"
            eff = " / ".join([e(kg, med.get(("kindling-gloo", model, 1))), e(km, med.get(("kindling-gloo", model, 1))),
                              e(py, med.get(("python-gloo", model, 1)))])
        print(f"| {model} | {n} | {cell(py)} | {cell(kg)} | {ratio(kg)} | {cell(km)} | {ratio(km)} | {eff} |")
print(f"\nsamples/s, median of {len(next(iter(runs.values())))} interleaved runs; ratio = kindling / Python DDP")
EOF

echo
echo "# loader alone: Fashion-MNIST, ToTensor + RandomCrop(28, padding 2) + Normalize, batch 128, 1 rank"
for w in 0 2; do
  timeout 300 "$BENCH" --mode loader --batch 128 --workers "$w" --epochs 1 | grep RESULT
  timeout 300 $PY --mode loader --batch 128 --workers "$w" --epochs 1 | grep RESULT
done
