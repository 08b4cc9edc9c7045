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
