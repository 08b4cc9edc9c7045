#!/usr/bin/env bash
# Installs every system package kindling needs, by Debian package name. Idempotent:
# packages already present are skipped by apt. Run as root (or with sudo available).
set -euo pipefail

packages=(
  build-essential cmake ninja-build ccache git
  libtorch-dev python3-torch libgloo-dev libopenblas0-pthread
  libopenmpi-dev openmpi-bin
  slurm-wlm munge
  libgtest-dev libgmock-dev googletest libbenchmark-dev
  dataset-fashion-mnist zlib1g-dev libspdlog-dev libcli11-dev
  python3-torchvision python3-protobuf python3-venv tmux chromium
  nlohmann-json3-dev libcurl4-openssl-dev libssl-dev
  etcd-server
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages already installed"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q "${missing[@]}"
