#!/usr/bin/env bash
# Proves the README's use of an installed plimsoll works from another CMake project:
#   cmake --install BUILD_DIR --prefix PREFIX; find_package(plimsoll REQUIRED); target_link_libraries(app plimsoll::plimsoll)
# Installs the (already built) BUILD_DIR into a fresh temporary prefix, configures, builds and runs consumer/ against
# it, then deletes everything it made. BUILD_DIR is left as it was.
#   run_consumer_test.sh BUILD_DIR SOURCE_DIR CXX_COMPILER [CMAKE_ARG...]
# SOURCE_DIR is the plimsoll source root; CMAKE_ARGs go to the consumer's configure (C compiler, flags).
set -euo pipefail

if [[ $# -lt 3 ]]; then
  echo "usage: $0 BUILD_DIR SOURCE_DIR CXX_COMPILER [CMAKE_ARG...]" >&2
  exit 2
fi
build_dir="$(realpath "$1")"
source_dir="$(realpath "$2")"
cxx_compiler="$3"
shift 3
consumer_dir="$source_dir/tests/package/consumer"

tmp="$(mktemp -d "${TMPDIR:-/tmp}/plimsoll-package-test.XXXXXX")"
# `cmake --install` writes BUILD_DIR/install_manifest.txt: keep whatever a real install left there, or remove ours.
manifest="$build_dir/install_manifest.txt"
if [[ -e "$manifest" ]]; then cp -p "$manifest" "$tmp/install_manifest.txt.saved"; fi
cleanup() {
  if [[ -e "$tmp/install_manifest.txt.saved" ]]; then
    cp -p "$tmp/install_manifest.txt.saved" "$manifest"
  else
    rm -f "$manifest"
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT

# Runs one step with its output in a log; on failure prints the step, the command and the log.
step() {
  local name="$1"
  shift
  echo "--- $name"
  if ! "$@" >"$tmp/step.log" 2>&1; then
    echo "FAILED: $name" >&2
    echo "command: $*" >&2
    cat "$tmp/step.log" >&2
    exit 1
  fi
}

prefix="$tmp/prefix"
step "install $build_dir into a temporary prefix" cmake --install "$build_dir" --prefix "$prefix"

expect_file() {
  if [[ ! -f "$prefix/$1" ]]; then
    echo "FAILED: the install did not produce $1; installed files:" >&2
    (cd "$prefix" && find . -type f | sort) >&2
    exit 1
  fi
}
libdir="$(cd "$prefix" && dirname "$(find . -path '*/cmake/plimsoll/plimsollConfig.cmake' | head -n 1)")"
libdir="${libdir%/cmake/plimsoll}"
expect_file "$libdir/cmake/plimsoll/plimsollConfig.cmake"
expect_file "$libdir/cmake/plimsoll/plimsollConfigVersion.cmake"
expect_file "$libdir/cmake/plimsoll/plimsollTargets.cmake"
expect_file "$libdir/libplimsoll.a"
expect_file include/plimsoll/plimsoll.hpp
expect_file include/plimsoll/plimsoll.h
expect_file bin/plimsoll

step "configure the consumer with find_package(plimsoll)" \
  cmake -S "$consumer_dir" -B "$tmp/consumer-build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_CXX_COMPILER="$cxx_compiler" -DCMAKE_PREFIX_PATH="$prefix" -DEXPECTED_PREFIX="$prefix" \
    -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF "$@"
step "build the consumer" cmake --build "$tmp/consumer-build"
step "run the consumer" "$tmp/consumer-build/consumer"
cat "$tmp/step.log"
echo "--- installed package works from find_package(plimsoll)"
