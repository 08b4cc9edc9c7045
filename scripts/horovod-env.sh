#!/usr/bin/env bash
# Makes (or reuses) a venv with the real Horovod (scripts/requirements-horovod.txt), built from
# its PyPI source against Debian's torch 1.13 with the gloo and MPI controllers, and prints its
# horovodrun. Horovod has no wheel on PyPI: the build compiles Horovod's C++ core and its torch
# extension, about 15 minutes on 2 cores, once; the venv (outside the work tree, by default
# ~/.cache/kindling/horovod-0.28.1-torch1.13, KINDLING_HOROVOD_VENV overrides) is kept while its
# packages match the pins. scripts/test.sh does not make it (CI time); the horovodrun test
# (tests/launch/horovodrun_test.sh) is skipped, with this command named, where it is absent.
# Usage: scripts/horovod-env.sh  -> ~/.cache/kindling/horovod-0.28.1-torch1.13/bin/horovodrun
set -euo pipefail
cd "$(dirname "$0")/.."
REQ=$PWD/scripts/requirements-horovod.txt
VENV=${KINDLING_HOROVOD_VENV:-$HOME/.cache/kindling/horovod-$(sed -n 's/^horovod==//p' "$REQ")-torch1.13}
if [[ ! -x $VENV/bin/horovodrun ]] || ! cmp -s "$REQ" "$VENV/pinned.txt"; then
  echo "horovod-env.sh: building Horovod into $VENV (about 15 minutes)" >&2
  rm -rf "$VENV"
  mkdir -p "$(dirname "$VENV")"
  /usr/bin/python3 -m venv --system-site-packages "$VENV" >&2
  HOROVOD_WITH_PYTORCH=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITH_MPI=1 HOROVOD_WITHOUT_TENSORFLOW=1 \
    HOROVOD_WITHOUT_MXNET=1 HOROVOD_CPU_OPERATIONS=gloo MAKEFLAGS=-j2 \
    "$VENV/bin/pip" install --quiet --disable-pip-version-check --no-deps --no-build-isolation -r "$REQ" >&2
  cp "$REQ" "$VENV/pinned.txt"  # last: a half-made venv never passes for a whole one
fi
"$VENV/bin/python" -c 'import horovod.torch' >&2 ||
  { echo "horovod-env.sh: $VENV does not import horovod.torch; remove it and run again" >&2; exit 1; }
echo "$VENV/bin/horovodrun"
