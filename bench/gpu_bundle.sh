#!/usr/bin/env bash
# Packs the GPU test and benchmark programs built here, with the shared
# libraries they need that a bare CUDA machine lacks (oneDNN, OpenBLAS, fmt,
# libgomp, ...; not glibc, libstdc++ or CUDA's own), into one compressed
# file for bench/gpu_check.sh to run on a GPU machine that cannot install
# packages or build the project (e.g. one without access to a package registry).
# Usage: bench/gpu_bundle.sh [BUILD_DIR] [OUT_DIR]   (defaults: build, .gpu-bundle)
set -euo pipefail
build=${1:-build}
out=${2:-.gpu-bundle}
progs="merak merak_full merak_cuda merak_gpu_tests merak_gpu_backend_tests merak_gpu_ops_bench merak_nccl_tests merak_nccl_allreduce"
cmake --build "$build" -j "$(nproc)" --target $progs >/dev/null
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib"
for p in $progs; do
  exe=$build/bin/$p
  [[ $p == merak_full ]] && exe=$build/bin/merak-full
  [[ $p == merak_cuda ]] && exe=$build/bin/libmerak_cuda.so
  [[ -x "$exe" ]] || continue
  cp "$exe" "$stage/bin/"
  # Libraries resolved outside CUDA's folders, except the C and C++ runtimes
  # every Linux has.
  ldd "$exe" | awk '$3 ~ /^\// {print $3}' | while read -r lib; do
    case "$lib" in
      /usr/local/cuda*|*/libc.so*|*/libm.so*|*/libdl.so*|*/libpthread.so*|*/librt.so*|*/libstdc++.so*|*/libgcc_s.so*|*/ld-linux*) ;;
      *) cp -L "$lib" "$stage/lib/" ;;
    esac
  done
done
git rev-parse HEAD >"$stage/commit" 2>/dev/null || true
mkdir -p "$out"
tar -C "$stage" -cJf "$out/bundle.tar.xz" .
ls -la "$out/bundle.tar.xz"
echo "carry $out to the GPU machine; there: bench/gpu_check.sh --bundle $out/bundle.tar.xz"
