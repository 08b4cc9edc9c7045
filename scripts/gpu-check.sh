#!/usr/bin/env bash
# The GPU checks in one run, for a lent GPU machine that has a CUDA torch in its python3 but no
# network and no Debian packages (see docs/backends.md, "GPU runs"):
#   1. unpacks the Debian packages kindling builds with (headers and small libraries, fetched
#      on a networked machine by `scripts/gpu-check.sh --fetch DIR`) into / ;
#   2. builds kindling against that python3's LibTorch (nccl on, mpi off: the machine has no
#      Open MPI) in build-gpu/, only what the checks run;
#   3. runs the `_CUDA` tests and scripts/bench-gpu.sh.
# Usage: scripts/gpu-check.sh --fetch DIR          (here: download the packages into DIR)
#        scripts/gpu-check.sh DIR LOG_DIR [REPEATS] (there: steps 1-3, logs into LOG_DIR)
# Exits non-zero when the build or a test fails; the bench's figures are in LOG_DIR/bench-gpu.log.
set -uo pipefail
cd "$(dirname "$0")/.."
packages=(libbenchmark-dev libbenchmark1debian libcli11-dev libfmt-dev libfmt9 libgloo-dev libgmock-dev
          libgtest-dev libspdlog-dev libspdlog1.10 nlohmann-json3-dev zlib1g-dev)
if [ "${1:-}" = --fetch ]; then
  mkdir -p "$2" && cd "$2" && exec apt-get download "${packages[@]}"
fi
debs=${1:?usage: scripts/gpu-check.sh DEBS_DIR LOG_DIR [REPEATS]}
logs=${2:?usage: scripts/gpu-check.sh DEBS_DIR LOG_DIR [REPEATS]}
repeats=${3:-2}
mkdir -p "$logs"

# 1. A package whose files the machine already has is left out rather than written over
#    (its own copy serves); zlib's link to the library is re-pointed at the machine's libz.
for deb in "$debs"/*.deb; do
  clash=$(dpkg-deb -c "$deb" | awk '$1 !~ /^d/ {sub(/^\./, "", $6); print $6}' |
          while read -r f; do [ -e "$f" ] && echo "$f"; done | head -1)
  if [ -n "$clash" ]; then echo "gpu-check: keeping the machine's $clash (not unpacking $(basename "$deb"))"; continue; fi
  dpkg -x "$deb" /
done
libz=$(ls /usr/lib/x86_64-linux-gnu/libz.so.1.* /lib/x86_64-linux-gnu/libz.so.1.* 2>/dev/null | head -1)
[ -n "$libz" ] && [ ! -e /usr/lib/x86_64-linux-gnu/libz.so ] && ln -sf "$libz" /usr/lib/x86_64-linux-gnu/libz.so

python=$(command -v python3)
{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  "$python" -c 'import torch; print("torch", torch.__version__, "CUDA", torch.version.cuda, "NCCL", torch.cuda.nccl.version())'
  g++ --version | head -1; cmake --version | head -1; nproc
} 2>&1 | tee "$logs/machine.txt"

# 2. Only the checks' targets: the whole tree is built and tested on CPU machines (CI).
jobs=$(nproc)
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DKINDLING_WITH_MPI=OFF \
  -DCMAKE_PREFIX_PATH="$("$python" -c 'import torch; print(torch.utils.cmake_prefix_path)')" \
  -DKINDLING_PYTHON="$python" >"$logs/build.log" 2>&1 &&
  cmake --build build-gpu -j"$jobs" --target cuda_test bench_collectives bench_resnet_gpu kindling-run \
    >>"$logs/build.log" 2>&1
status=$?
if [ $status -ne 0 ]; then
  tail -40 "$logs/build.log"
  echo "gpu-check: the build failed (exit $status); the whole log is $logs/build.log"
  exit $status
fi
echo "gpu-check: built in build-gpu/"

# 3. The tests first (their verdict is the check), then the figures.
(cd build-gpu && ctest -R _CUDA -j4 --output-on-failure) 2>&1 | tee "$logs/cuda-tests.log"
tests=${PIPESTATUS[0]}
PYTHON=$python scripts/bench-gpu.sh build-gpu "$repeats" 2>&1 | tee "$logs/bench-gpu.log"
bench=${PIPESTATUS[0]}
echo "gpu-check: _CUDA tests exit $tests, bench exit $bench"
[ "$tests" -eq 0 ] && [ "$bench" -eq 0 ]
