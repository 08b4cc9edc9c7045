#!/usr/bin/env bash
# Makes (or reuses) the Python environment of the benchmarks' real peer: a venv beside Debian's
# torch 1.13 (--system-site-packages) with PyTorch-Ignite and TensorBoard at the versions pinned in
# bench/cifar10/requirements-peer-torch1.13.txt, installed without dependencies so that pip never
# replaces Debian's torch. Prints the venv's python. Idempotent: a venv whose packages match the
# pins is kept (about 5 s to make one from PyPI).
# Usage: scripts/python-peer.sh  -> .venv/peer-torch1.13/bin/python
set -euo pipefail
cd "$(dirname "$0")/.."
REQ=bench/cifar10/requirements-peer-torch1.13.txt
VENV=.venv/peer-torch1.13
if [[ ! -x $VENV/bin/python ]] || ! cmp -s "$REQ" "$VENV/pinned.txt"; then
  rm -rf "$VENV"
  /usr/bin/python3 -m venv --system-site-packages "$VENV" >&2
  "$VENV/bin/pip" install --quiet --disable-pip-version-check --no-deps -r "$REQ" >&2
  cp "$REQ" "$VENV/pinned.txt"
fi
"$VENV/bin/python" -c 'import ignite, torch, torch.utils.tensorboard' >&2 ||
  { echo "python-peer.sh: $VENV does not import ignite, torch and tensorboard; remove it and run again" >&2; exit 1; }
echo "$VENV/bin/python"
