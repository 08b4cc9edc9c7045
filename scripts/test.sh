#!/usr/bin/env bash
# The test command: installs dependencies, checks file and function sizes (scripts/check-sizes.py)
# and include floors (scripts/check-includes.py), then for each LibTorch in
# KINDLING_TEST_LIBTORCH ("debian pip" unless set; scripts/libtorch-choice.sh): builds, runs its
# tests (CTest), and builds consumer projects against that build (tests/consumer/check_consumers.sh).
#   debian  LibTorch 1.13: every test.
#   pip     LibTorch 2.15 from PyPI: every test but those labelled "torch1_only" (tests of
#           kindling's own launchers, files and harnesses that no LibTorch call reaches; the
#           label's list in tests/CMakeLists.txt says why each is there), to keep CI near 35 min.
# Consumer projects: installed and mismatched on both, FetchContent on pip's 2.15 only.
# Prints how long each phase took (CI time, docs/performance.md).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/libtorch-choice.sh
took() { echo "test.sh: $1 took $((SECONDS - mark)) s"; mark=$SECONDS; }
mark=$SECONDS
./scripts/install-deps.sh
took "installing dependencies"
# Sizes and include floors next (a file over 450 lines, a function over 80; an include up a floor
# or in a cycle; docs/design.md): they need no build, so a violation fails in seconds, not after
# the builds; after the installs, which bring python3 to a bare machine. Each self-test before its
# check: a check that no longer catches anything would pass.
# The include check is also the CTest include_floors (tests/CMakeLists.txt), for ctest run by hand.
python3 scripts/check-sizes-selftest.py
python3 scripts/check-sizes.py .
python3 scripts/check-includes.py --self-test
python3 scripts/check-includes.py .
took "checking sizes and includes"
# Builds CHOICE (a warning in kindling's own code fails CI; applies where the folder is configured
# first, as in CI's clean clone; a folder configured earlier keeps its setting).
build() { env KINDLING_LIBTORCH="$1" ./scripts/build.sh -DKINDLING_WARNINGS_AS_ERRORS=ON; }
# A build or check started in the background at the lowest CPU priority (nice 19), while a suite
# runs: the suites leave about a quarter of the two cores idle (docs/performance.md, CI time),
# which these take; a test's process, at the normal priority, gets the CPU first when it wants
# it. Output goes to a log, printed when the job fails.
# Each in a process group of its own (job control on while it starts: set -m), stopped with
# everything it started if test.sh ends first; in this session, not a new one (setsid): with the
# kernel's autogroup scheduling (sched_autogroup_enabled) each session shares the CPU as one
# group whatever its processes' nice, and a build in its own session took half the CPU from
# the tests (the 1.13 suite was 28 of 112 tests in after 14 minutes).
logs=$(mktemp -d)
background=()
trap 'for pid in "${background[@]}"; do kill -- "-$pid" 2>/dev/null || true; done; rm -rf "$logs"' EXIT
in_background() {
  local name=$1
  shift
  set -m
  nice -n 19 "$@" > "$logs/$name.log" 2>&1 &
  set +m
  background+=($!)
}
finish() {  # finish NAME PID: waits for a background job; its log on failure
  if ! wait "$2"; then
    tail -n 200 "$logs/$1.log"
    echo "test.sh: $1 failed (the end of its output above)" >&2
    exit 1
  fi
}
read -r -a choices <<< "${KINDLING_TEST_LIBTORCH:-debian pip}"
build "${choices[0]}"
took "the ${choices[0]} build"
for i in "${!choices[@]}"; do
  choice=${choices[$i]}
  next=${choices[$((i + 1))]:-}
  dir=$(build_dir_of "$choice")
  echo "test.sh: LibTorch '$choice' in $dir"
  # The next LibTorch's build, beside this one's tests.
  if [ -n "$next" ]; then
    in_background "the $next build" env KINDLING_LIBTORCH="$next" ./scripts/build.sh -DKINDLING_WARNINGS_AS_ERRORS=ON
    next_pid=$!
  fi
  # Projects of users that consume kindling: installed (find_package) and with a mismatched
  # LibTorch (refused) on each LibTorch; as a FetchContent subproject on the current one (2.15)
  # only, where users who add the source tree are, as it compiles the library once more: beside
  # the tests, unless another build already runs there.
  fetch_pid=
  if [ "$choice" = pip ] && [ -z "$next" ]; then
    in_background "the pip FetchContent consumer" ./tests/consumer/check_consumers.sh "$dir" --fetchcontent-only
    fetch_pid=$!
  fi
  skip=()
  if [ "$choice" = pip ]; then skip=(-LE torch1_only); fi
  # Flight records of the tests' failing ranks go into the build folder, not /tmp (tests that
  # read them set their own folder; the multi-process harness gives each run one it removes).
  export KINDLING_FLIGHT_RECORD_DIR="$PWD/$dir/test-flight-records"
  # Two tests at a time (7.8 minutes instead of 10 on a 2-core machine); more at once is not
  # faster: the suite keeps both cores busy (docs/performance.md, CI time). Tests that use fixed
  # ports pick free ones.
  (cd "$dir" && ctest --output-on-failure -j2 --timeout 300 "${skip[@]}")
  took "the $choice tests"
  fetch=(--no-fetchcontent)
  if [ "$choice" = pip ] && [ -n "$next" ]; then fetch=(); fi
  ./tests/consumer/check_consumers.sh "$dir" "${fetch[@]}"
  took "the $choice consumers"
  if [ -n "$fetch_pid" ]; then
    finish "the pip FetchContent consumer" "$fetch_pid"
    took "the rest of the pip FetchContent consumer"
  fi
  if [ -n "$next" ]; then
    finish "the $next build" "$next_pid"
    took "the rest of the $next build"
  fi
done
echo "test.sh: all tests passed in $SECONDS s"
