#!/usr/bin/env bash
# Users' projects that consume kindling, built outside its tree:
#  1. find_package(kindling) against an installed copy: builds and runs;
#  2. the installed copy with another LibTorch than the one it was built against: the
#     configure step fails with a message naming both versions;
#  3. FetchContent of the source tree as a subproject: builds the library only, leaves the
#     parent's CMAKE_BUILD_TYPE unset, links and runs (compiles the library once more, without
#     the build folder's objects: about 4 minutes on 2 cores).
# Usage: check_consumers.sh <kindling build folder> [--no-fetchcontent]
#   --no-fetchcontent  checks 1 and 2 only (scripts/test.sh: FetchContent on one LibTorch).
set -euo pipefail
src="$(cd "$(dirname "$0")/../.." && pwd)"
build="$(cd "$1" && pwd)"
fetchcontent=yes
[ "${2:-}" = --no-fetchcontent ] && fetchcontent=no
# Inside the build folder, at a fixed place: the compiler cache then hits the library's objects
# from an earlier run of this script (paths under the source tree are made relative).
work=$build/consumers
rm -rf "$work"
mkdir -p "$work"
trap 'rm -rf "$work"' EXIT
# The LibTorch that kindling was built against, found the same way (empty for Debian's).
torch_prefix=$(sed -n 's/^CMAKE_PREFIX_PATH:[A-Z]*=//p' "$build/CMakeCache.txt")
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
# A step's output only when it fails (a compile error must not be swallowed with the rest).
quiet() {
  "$@" >"$work/step.log" 2>&1 || { tail -60 "$work/step.log"; echo "check_consumers: failed: $*" >&2; exit 1; }
}

quiet cmake --install "$build" --prefix "$work/prefix"
quiet cmake -S "$src/tests/consumer" -B "$work/installed" "${generator[@]}" -DCMAKE_PREFIX_PATH="$work/prefix;$torch_prefix" \
  -DCMAKE_BUILD_TYPE=Release
quiet cmake --build "$work/installed" -j2
"$work/installed/consumer"

# A LibTorch of another version (a stand-in package: only its version matters here).
mkdir -p "$work/other-torch"
echo 'set(PACKAGE_VERSION "0.99.0")
set(PACKAGE_VERSION_COMPATIBLE TRUE)' > "$work/other-torch/TorchConfigVersion.cmake"
echo 'set(TORCH_INSTALL_PREFIX "${CMAKE_CURRENT_LIST_DIR}")
set(TORCH_FOUND TRUE)' > "$work/other-torch/TorchConfig.cmake"
if cmake -S "$src/tests/consumer" -B "$work/mismatch" "${generator[@]}" -DCMAKE_PREFIX_PATH="$work/prefix" \
    -DTorch_DIR="$work/other-torch" > "$work/mismatch.log" 2>&1; then
  echo "check_consumers: a LibTorch of another version was accepted" >&2
  exit 1
fi
# CMake wraps the message: compare it as one line.
tr -s ' \n' '  ' < "$work/mismatch.log" |
  grep -q "was built against LibTorch [0-9.]*, but find_package(Torch) found LibTorch 0.99.0" || {
  cat "$work/mismatch.log" >&2
  echo "check_consumers: the LibTorch mismatch was refused without naming both versions" >&2
  exit 1
}

if [ $fetchcontent = no ]; then
  echo "check_consumers: installed and mismatched LibTorch consumers passed (FetchContent not asked for)"
  exit 0
fi
quiet cmake -S "$src/tests/consumer" -B "$work/fetched" "${generator[@]}" -DKINDLING_FROM_SOURCE="$src" \
  -DCMAKE_PREFIX_PATH="$torch_prefix" -DCONSUMER_EXPECTED_BUILD_TYPE=
quiet cmake --build "$work/fetched" -j2 --target consumer
"$work/fetched/consumer"
echo "check_consumers: installed, mismatched LibTorch and FetchContent consumers passed"
