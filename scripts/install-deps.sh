#!/usr/bin/env bash
# Installs the Debian packages that the build, the tests, the fuzzers and the benchmarks need.
# Idempotent: when everything is present it only asks dpkg, so CI pays nothing on a warm image.
set -euo pipefail

packages=(
  build-essential g++-12 cmake ninja-build pkg-config
  clang-14 lld-14 libclang-rt-14-dev          # the Clang build, the sanitizers and libFuzzer
  libcli11-dev nlohmann-json3-dev libfmt-dev zlib1g-dev
  libdw-dev                                   # call sites of recorded allocations, symbolized by elfutils
  chromium                                    # opens the HTML timeline in a test (headless)
  libgtest-dev libgmock-dev                   # tests
  libbenchmark-dev libjemalloc-dev libmimalloc-dev python3   # benchmarks (python3 prints their table)
)

missing=()
for package in "${packages[@]}"; do
  # "install ok installed" is the only state in which the package's files are really there.
  if [[ "$(dpkg-query -W -f='${Status}' "$package" 2>/dev/null || true)" != "install ok installed" ]]; then
    missing+=("$package")
  fi
done

if [[ ${#missing[@]} -eq 0 ]]; then
  echo "all dependencies present"
  exit 0
fi

if [[ "$(id -u)" -eq 0 ]]; then
  as_root=()
elif command -v sudo >/dev/null 2>&1; then
  as_root=(sudo)
else
  echo "error: missing packages (${missing[*]}) and not root, with no sudo to install them;" \
       "run this script as root or install them yourself: apt-get install ${missing[*]}" >&2
  exit 1
fi

echo "installing: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
echo "installed: ${missing[*]}"
