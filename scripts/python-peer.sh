#!/usr/bin/env bash
# Prints the Python of the benchmarks' real peer (PyTorch-Ignite and TensorBoard beside a torch)
# for the torch of PYTHON (default /usr/bin/python3, Debian's torch 1.13):
# - a Python with Debian's torch (/usr/bin/python3): a venv beside Debian's torch 1.13 (--system-site-packages) with
#   PyTorch-Ignite and TensorBoard at the versions pinned in
#   bench/cifar10/requirements-peer-torch1.13.txt, installed without dependencies so that pip never
#   replaces Debian's torch; a venv whose packages match the pins is kept (about 5 s to make);
# - a Python with another torch (the LibTorch 2.x venv of scripts/torch2-env.sh, which pins ignite 0.5.5):
#   PYTHON itself, which must import ignite and tensorboard.
# Usage: scripts/python-peer.sh [PYTHON]  -> <checkout>/.venv/peer-torch1.13/bin/python, or PYTHON
set -euo pipefail
cd "$(dirname "$0")/.."
TORCH_PYTHON=${1:-/usr/bin/python3}
# Debian's torch is the one in /usr/lib/python3/dist-packages (a venv of Debian's python3 has the
# same interpreter but its own torch: compare the torch, not the interpreter).
if ! "$TORCH_PYTHON" -c 'import sys, torch; sys.exit(not torch.__file__.startswith("/usr/lib/python3/"))' 2>/dev/null; then
  "$TORCH_PYTHON" -c 'import ignite, torch, torch.utils.tensorboard' >&2 ||
    { echo "python-peer.sh: $TORCH_PYTHON does not import ignite, torch and tensorboard (the LibTorch 2.x venv of" \
        "scripts/torch2-env.sh has them)" >&2; exit 1; }
  echo "$TORCH_PYTHON"
  exit 0
fi
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
echo "$PWD/$VENV/bin/python"
