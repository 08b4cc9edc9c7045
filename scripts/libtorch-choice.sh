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
