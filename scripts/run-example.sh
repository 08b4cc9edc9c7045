#!/usr/bin/env bash
# The main job: installs dependencies, builds, and runs examples/dist_tutorial, which
# starts 2 local processes itself (kindling::dist::Parallel) and runs the programs of
# PyTorch's distributed tutorial: point-to-point, group all-reduce, ring all-reduce, and
# synchronous SGD on Fashion-MNIST (Debian's dataset-fashion-mnist) printing per-epoch loss.
# Arguments go to dist_tutorial, e.g. `./scripts/run-example.sh train --epochs 1`.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
./scripts/build.sh
exec ./build/examples/dist_tutorial/dist_tutorial "$@"
