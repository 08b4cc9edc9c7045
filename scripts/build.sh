#!/usr/bin/env bash
# Configures and builds kindling (Release, Ninja, ccache when present) against one LibTorch,
# chosen by KINDLING_LIBTORCH:
#   debian (default)  Debian's LibTorch 1.13 (libtorch-dev, scripts/install-deps.sh), in ./build;
#   pip               LibTorch 2.x from PyPI's torch wheel (scripts/torch2-env.sh makes its venv),
#                     in ./build-torch2; the tests' Python peers and checkers use the venv's torch.
# Arguments are passed to the first configure of that folder (e.g. -DKINDLING_WITH_NCCL=OFF).
# Prints nothing of its own but CMake's and the build's output.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/libtorch-choice.sh
KINDLING_LIBTORCH=${KINDLING_LIBTORCH:-debian}
dir=$(build_dir_of "$KINDLING_LIBTORCH")
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
if [ ! -f "$dir/CMakeCache.txt" ]; then
  torch=()
  if [ "$KINDLING_LIBTORCH" = pip ]; then
    python=$(scripts/torch2-env.sh)
    torch=(-DCMAKE_PREFIX_PATH="$("$python" -c 'import torch; print(torch.utils.cmake_prefix_path)')"
           -DKINDLING_PYTHON="$python")
  fi
  cmake -S . -B "$dir" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release "${torch[@]}" "$@"
fi
cmake --build "$dir" -j2
