#!/usr/bin/env bash
# The test command: installs dependencies, builds, runs every test (CTest), then builds
# consumer projects against kindling (tests/consumer/check_consumers.sh) and runs them.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
./scripts/build.sh
# Two tests at a time: most of them wait on processes, sockets and timeouts rather than compute
# (7.8 minutes instead of 10 on a 2-core machine). Tests that use fixed ports pick free ones.
(cd build && ctest --output-on-failure -j2 --timeout 300)

# Projects of users that consume kindling: installed (find_package), with a mismatched
# LibTorch (refused), and as a FetchContent subproject.
./tests/consumer/check_consumers.sh build
echo "test.sh: all tests passed"
