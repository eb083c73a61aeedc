#!/usr/bin/env bash
# Builds what scripts/gpu-check.sh runs on a GPU machine into one folder to carry there: the GPU machines the
# device tool lends have the NVIDIA driver, CMake, ninja, PyTorch, JAX and CuPy but no Debian packages and no
# network, so plimsoll's dependencies (fmt, CLI11, nlohmann-json, GoogleTest, libdw) cannot be installed there.
#   scripts/gpu-bundle.sh [BUNDLE_DIR]      default build-gpu-bundle (ignored by git, so the device tool carries it)
# Builds the targets in build (BUILD_DIR; configured Release with g++-12 if new), then copies into BUNDLE_DIR:
#   bin/   the test binaries of the CUDA path (real-driver and fake-driver) and plimsoll_replay_bench
#   traces/ ../shared/traces, for the replay benchmarks
#   lib/   libplimsoll_torch_cuda.so and the shared libraries the binaries need beyond glibc and libstdc++ (which
#          the GPU machine's Ubuntu has, newer: a bundled libstdc++ could clash with PyTorch's in one process)
#   MANIFEST  the commit, the date, the compiler and the size
# The folder must stay under the device tool's 64 MiB carry limit; the script says so when it does not.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"
bundle="$(realpath -m "${1:-build-gpu-bundle}")"
build_dir="${BUILD_DIR:-build}"  # the usual build dir: what CI tests is what is carried
tests=(gpu_cuda_streams_test backings_cuda_vmm_test runtime_cuda_devices_test engine_streams_test
       engine_streams_random_test threads_engine_streams_test threads_cuda_streams_test
       integrations_torch_cuda_device_test integrations_torch_cuda_so_test gpu_pause_test)
# Not the plimsoll CLI: `plimsoll train` links libtorch and, through Debian's build of it, some 500 MB of libraries.
tools=(plimsoll_replay_bench plimsoll_torch_cuda)

[[ -f "$build_dir/build.ninja" ]] ||
  cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPLIMSOLL_WERROR=ON -DCMAKE_CXX_COMPILER="${CXX:-g++-12}" \
    -DCMAKE_C_COMPILER="${CC:-gcc-12}" -DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache >/dev/null
cmake --build "$build_dir" -j "${PLIMSOLL_JOBS:-2}" --target "${tests[@]}" "${tools[@]}"

rm -rf "$bundle"
mkdir -p "$bundle/bin" "$bundle/lib"
for test in "${tests[@]}"; do cp "$build_dir/tests/$test" "$bundle/bin/"; done
cp "$build_dir/bench/plimsoll_replay_bench" "$bundle/bin/"
cp "$build_dir/src/integrations/torch_cuda/libplimsoll_torch_cuda.so" "$bundle/lib/"
strip --strip-unneeded "$bundle"/bin/* "$bundle"/lib/*.so

# Shared libraries beyond glibc, libstdc++ and libgcc_s, found by ldd on this machine.
for binary in "$bundle"/bin/* "$bundle"/lib/*.so; do
  ldd "$binary" | awk '/=> \// {print $3}'
done | sort -u | while read -r library; do
  case "$(basename "$library")" in
    libc.so.* | libm.so.* | libdl.so.* | libpthread.so.* | librt.so.* | ld-linux* | libstdc++.so.* | libgcc_s.so.*) ;;
    *) cp -L "$library" "$bundle/lib/" ;;
  esac
done

# The shared traces, for the replay benchmarks (the device tool copies only the repository and what is carried).
if compgen -G "$repo_root/../shared/traces/*.trace" >/dev/null; then
  mkdir -p "$bundle/traces"
  cp "$repo_root"/../shared/traces/*.trace "$repo_root/../shared/traces/README.md" "$bundle/traces/"
fi

size_bytes=$(du -sb "$bundle" | cut -f1)
{
  echo "commit $(git rev-parse HEAD)$(git diff --quiet HEAD -- src include tests bench || echo ' (with uncommitted changes)')"
  echo "built $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(. /etc/os-release && echo "$PRETTY_NAME"), glibc $(ldd --version | head -1 | awk '{print $NF}')"
  echo "compiler $("${CXX:-g++-12}" --version | head -1)"
  echo "size $size_bytes bytes"
} >"$bundle/MANIFEST"
cat "$bundle/MANIFEST"
if ((size_bytes > 64 * 1024 * 1024)); then
  echo "error: $bundle is $((size_bytes >> 20)) MiB, over the device tool's 64 MiB carry limit" >&2
  exit 1
fi
echo "bundle: $bundle ($((size_bytes >> 20)) MiB); carry it with the device tool: carry [\"$(basename "$bundle")\"]"
