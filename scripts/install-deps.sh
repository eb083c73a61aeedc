#!/usr/bin/env bash
# Installs the Debian packages that the build, the tests, the fuzzers and the benchmarks need.
# Idempotent: when everything is present it only asks dpkg, so CI pays nothing on a warm image.
#   scripts/install-deps.sh                 what the build, the tests, CI and `plimsoll train` need (libtorch 1.13
#                                           included, some 800 MB the first time)
#   scripts/install-deps.sh --with-pytorch  kept for old scripts: PyTorch for Python 3 is now in the default list
#                                           (the Python module's tests need it)
set -euo pipefail

with_pytorch=0
for arg in "$@"; do
  case "$arg" in
    --with-pytorch) with_pytorch=1 ;;
    *) echo "error: unknown option '$arg'; use --with-pytorch or nothing" >&2; exit 1 ;;
  esac
done

packages=(
  build-essential g++-12 cmake ninja-build pkg-config
  clang-14 lld-14 libclang-rt-14-dev          # the Clang build, the sanitizers and libFuzzer
  libcli11-dev nlohmann-json3-dev libfmt-dev zlib1g-dev
  libdw-dev                                   # call sites of recorded allocations, symbolized by elfutils
  chromium                                    # opens the HTML timeline in a test (headless)
  libgtest-dev libgmock-dev                   # tests
  dataset-fashion-mnist                       # real IDX files: `plimsoll train` and the dataset tests
  libtorch-dev                                # `plimsoll train` and plimsoll_torch (libtorch 1.13, CPU)
  libgloo-dev                                 # Gloo's headers, for c10d's process group: `plimsoll train --nproc`
  libopenblas0-openmp                         # libtorch's BLAS: the reference libblas3 makes a step several times slower
  libbenchmark-dev libjemalloc-dev libmimalloc-dev python3   # benchmarks (python3 prints their table)
  python3-dev python3-pybind11 python3-numpy python3-torch  # `import plimsoll`, `plimsoll run` and their tests
)
if [[ $with_pytorch -eq 1 ]]; then
  # PyTorch's DataLoader, a contender of bench/run_pipeline_compare.sh.
  packages+=(python3-torch python3-numpy)
fi

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
