#!/usr/bin/env bash
# The test command: installs dependencies, builds, runs every test (CTest), then builds a
# consumer project against the installed kindling (find_package(kindling)) and runs it.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
./scripts/build.sh
# Two tests at a time: most of them wait on processes, sockets and timeouts rather than compute
# (7.8 minutes instead of 10 on a 2-core machine). Tests that use fixed ports pick free ones.
(cd build && ctest --output-on-failure -j2 --timeout 300)

# Install into a temporary prefix and build tests/consumer against it.
prefix=$(mktemp -d /tmp/kindling-install-XXXXXX)
trap 'rm -rf "$prefix"' EXIT
cmake --install build --prefix "$prefix" >/dev/null
cmake -S tests/consumer -B "$prefix/consumer-build" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$prefix/consumer-build" -j2 >/dev/null
"$prefix/consumer-build/consumer"
echo "test.sh: all tests passed"
