# Sourced by the scripts that build or test. kindling builds against one of two LibTorch copies:
#   debian  LibTorch 1.13 from Debian's libtorch-dev (scripts/install-deps.sh), built in ./build;
#   pip     LibTorch 2.x from PyPI's torch wheel (scripts/torch2-env.sh), built in ./build-torch2.
# build_dir_of CHOICE prints CHOICE's build folder; any other CHOICE ends with a message and 2.
build_dir_of() {
  case $1 in
    debian) echo build ;;
    pip) echo build-torch2 ;;
    *)
      echo "$(basename "$0"): KINDLING_LIBTORCH=$1 is not a LibTorch kindling builds against; use 'debian'" \
        "(LibTorch 1.13 from Debian's libtorch-dev, the default) or 'pip' (LibTorch 2.x from PyPI's torch wheel," \
        "scripts/torch2-env.sh)" >&2
      return 2 ;;
  esac
}

# torch_python_of CHOICE prints the Python whose torch matches CHOICE's LibTorch (Debian's
# python3 for 1.13; the venv of scripts/torch2-env.sh, made if absent, for 2.15).
torch_python_of() {
  case $1 in
    debian) echo /usr/bin/python3 ;;
    pip) "$(dirname "${BASH_SOURCE[0]}")/torch2-env.sh" ;;
    *) build_dir_of "$1" ;;
  esac
}

# ensure_benchmarks DIR: the benchmark programs built in the build folder DIR. scripts/test.sh
# configures the LibTorch 1.13 folder without them (CI builds and smoke-runs them on 2.15 only);
# a bench script run after it turns them on and builds them (minutes the first time).
ensure_benchmarks() {
  local dir=$1
  [ -f "$dir/CMakeCache.txt" ] || return 0  # no build yet: the bench script says what is missing
  grep -q '^KINDLING_BUILD_BENCHMARKS:BOOL=OFF' "$dir/CMakeCache.txt" || return 0
  echo "$(basename "$0"): $dir was configured without benchmarks (scripts/test.sh does so for LibTorch 1.13):" \
    "turning them on and building them" >&2
  cmake -S . -B "$dir" -DKINDLING_BUILD_BENCHMARKS=ON >/dev/null
  cmake --build "$dir" -j2 >/dev/null
}
