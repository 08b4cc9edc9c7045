#!/usr/bin/env bash
# Sanitizer builds (run before a release, not in CI: each build takes about as long as the
# whole CI job on a 2-core machine).
#
#   scripts/sanitize.sh asan [ctest -R regex]   ASan + UBSan build in build-asan, the test suite
#   scripts/sanitize.sh tsan                    TSan build in build-tsan: the DDP reducer, the data
#                                               loader, the stall monitor and the mpi shared-memory
#                                               all-reduce (nn_test, dist_test's stall and large
#                                               all-reduce tests)
#
# LibTorch itself is not instrumented: ASan still checks every access kindling's code makes
# (and LibTorch's through intercepted allocations); TSan cannot see LibTorch's own thread
# synchronisation, so its reports are filtered by scripts/tsan.supp (LibTorch, gloo, Open MPI
# internals only, never a kindling frame). Leak checking is off: LibTorch keeps global
# allocations until exit on purpose.
set -euo pipefail
cd "$(dirname "$0")/.."
kind=${1:-asan}
shift || true
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
common=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DKINDLING_BUILD_BENCHMARKS=OFF -DKINDLING_UNITY_BUILD=ON)
targets=()
extra=()
case "$kind" in
  asan)
    dir=build-asan
    flags="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined"
    export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1:detect_odr_violation=0
    export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
    tests=("$@")
    ;;
  tsan)
    dir=build-tsan
    flags="-fsanitize=thread -fno-omit-frame-pointer"
    export TSAN_OPTIONS="suppressions=$PWD/scripts/tsan.supp:halt_on_error=1:second_deadlock_stack=1"
    tests=(-R "Ddp|Loader|AutoDataloader|Stall|StoppedRank|LargeAllReduce|MpiSharedMemory")
    # Only the two executables those tests live in.
    targets=(--target nn_test dist_test)
    extra=(-DKINDLING_BUILD_EXAMPLES=OFF)
    ;;
  *)
    echo "usage: scripts/sanitize.sh asan|tsan [ctest arguments]" >&2
    exit 2
    ;;
esac
if [ ! -f "$dir/CMakeCache.txt" ]; then
  cmake -S . -B "$dir" "${generator[@]}" "${common[@]}" "${extra[@]}" -DCMAKE_CXX_FLAGS="$flags" \
    -DCMAKE_EXE_LINKER_FLAGS="$flags" -DCMAKE_SHARED_LINKER_FLAGS="$flags"
fi
cmake --build "$dir" -j2 "${targets[@]}"
# The sanitizers slow the code 2-10x: a longer per-test limit.
(cd "$dir" && ctest --output-on-failure -j1 --timeout 900 "${tests[@]}")
echo "sanitize.sh: $kind run passed"
