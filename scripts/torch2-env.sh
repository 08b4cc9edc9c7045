#!/usr/bin/env bash
# Makes (or reuses) the venv of LibTorch 2.x: PyPI's torch wheel and the packages pinned in
# scripts/requirements-torch2.txt, in a venv of Debian's python3 without Debian's site packages
# (Debian's torch 1.13 must not be seen from it). The venv lives outside the work tree, by
# default in ~/.cache/kindling/torch-<version> (KINDLING_TORCH2_VENV overrides), so that every
# clone on the machine shares one copy of its 5.5 GB; a venv whose packages match the pins is
# kept. Prints the venv's python. The build then finds LibTorch with
#   "$(scripts/torch2-env.sh)" -c 'import torch; print(torch.utils.cmake_prefix_path)'
# Usage: scripts/torch2-env.sh  -> /root/.cache/kindling/torch-2.15.0/bin/python
set -euo pipefail
cd "$(dirname "$0")/.."
REQ=$PWD/scripts/requirements-torch2.txt
version=$(sed -n 's/^torch==//p' "$REQ")
VENV=${KINDLING_TORCH2_VENV:-$HOME/.cache/kindling/torch-$version}
# Pins only added since the venv was made (every pin it was made with still in the list; comments
# may differ): those packages are installed into it, not the whole venv again (minutes, 5.5 GB).
pins() { grep -v -e '^#' -e '^$' "$1"; }
if [[ -x $VENV/bin/python && -f $VENV/pinned.txt ]] && ! cmp -s "$REQ" "$VENV/pinned.txt" &&
   [ -z "$(pins "$VENV/pinned.txt" | grep -vxF -f <(pins "$REQ"))" ]; then
  added=$(pins "$REQ" | grep -vxF -f <(pins "$VENV/pinned.txt") || true)
  if [ -n "$added" ]; then
    echo "torch2-env.sh: adding the newly pinned $(echo $added) to $VENV" >&2
    # shellcheck disable=SC2086
    "$VENV/bin/pip" install --quiet --disable-pip-version-check --no-deps $added >&2
  fi
  cp "$REQ" "$VENV/pinned.txt"
fi
if [[ ! -x $VENV/bin/python ]] || ! cmp -s "$REQ" "$VENV/pinned.txt"; then
  echo "torch2-env.sh: installing torch $version and its pinned packages into $VENV (about 5.5 GB)" >&2
  rm -rf "$VENV"
  mkdir -p "$(dirname "$VENV")"
  /usr/bin/python3 -m venv "$VENV" >&2
  # A half-made venv never passes for a whole one: pinned.txt is written last.
  "$VENV/bin/pip" install --quiet --disable-pip-version-check --no-deps -r "$REQ" >&2
  cp "$REQ" "$VENV/pinned.txt"
fi
"$VENV/bin/python" -c 'import torch, torchvision, ignite, torch.utils.tensorboard' >&2 ||
  { echo "torch2-env.sh: $VENV does not import torch, torchvision, ignite and tensorboard; remove it and run again" >&2
    exit 1; }
echo "$VENV/bin/python"
