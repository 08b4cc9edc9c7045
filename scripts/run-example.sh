#!/usr/bin/env bash
# The main job: installs dependencies, builds, and runs examples/cifar10, PyTorch-Ignite's
# CIFAR10 tutorial in C++, on 2 local processes it starts itself (kindling::dist::Parallel,
# gloo) with the embedded default data (Debian's Fashion-MNIST). It prints a progress bar,
# the evaluations, a results table and the run folder (checkpoints, TensorBoard logs,
# report.html). Arguments go to the program, e.g. `./scripts/run-example.sh --num_epochs 1`
# or `./scripts/run-example.sh --data_path ~/cifar-10-batches-bin`. It builds against Debian's
# LibTorch 1.13 unless KINDLING_LIBTORCH=pip (LibTorch 2.15 from PyPI, a 5.5 GB venv made once).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/libtorch-choice.sh
dir=$(build_dir_of "${KINDLING_LIBTORCH:-debian}")
./scripts/install-deps.sh
./scripts/build.sh
exec "./$dir/examples/cifar10/cifar10" --nproc_per_node 2 "$@"
