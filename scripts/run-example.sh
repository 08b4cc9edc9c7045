#!/usr/bin/env bash
# The main job: installs dependencies, builds, and runs examples/cifar10, PyTorch-Ignite's
# CIFAR10 tutorial in C++, on 2 local processes it starts itself (kindling::dist::Parallel,
# gloo) with the embedded default data (Debian's Fashion-MNIST). It prints a progress bar,
# the evaluations, a results table and the run folder (checkpoints, TensorBoard logs,
# report.html). Arguments go to the program, e.g. `./scripts/run-example.sh --num_epochs 1`
# or `./scripts/run-example.sh --data_path ~/cifar-10-batches-bin`.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
./scripts/build.sh
exec ./build/examples/cifar10/cifar10 --nproc_per_node 2 "$@"
