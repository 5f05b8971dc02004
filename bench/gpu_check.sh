#!/usr/bin/env bash
# One-go check of the CUDA/NCCL parts on a machine with a GPU (never run on
# the 2-core build machine, which has none): configure and build the GPU
# targets, run the tests labelled gpu, then ncclAllReduce at 4, 16 and 64 MiB
# (N = 1 always; N = number of GPUs when there are several). Prints the test
# summary and one JSON object per benchmark run. Meant to finish in < 5 min
# on a 16-core machine.
# Usage: bench/gpu_check.sh [BUILD_DIR]   (default build-gpu; run from the repo root)
set -uo pipefail
build=${1:-build-gpu}
jobs=$(nproc)
t0=$(date +%s)
nvidia-smi -L || echo "nvidia-smi: no GPU listed"
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
echo "gpus=$gpus"

timeout 120 cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMERAK_WITH_CUDA=ON \
  -DMERAK_NATIVE=OFF >"$build.configure.log" 2>&1 || {
  echo "configure failed:"; tail -30 "$build.configure.log"; exit 1; }
grep -E "merak: (NCCL|cuda|UCX)" "$build.configure.log"
targets="merak_gpu_tests merak_nccl_tests merak_nccl_allreduce"
timeout 200 cmake --build "$build" -j "$jobs" --target $targets >"$build.build.log" 2>&1 || {
  echo "build failed:"; grep -E "error|Error" "$build.build.log" | head -30; exit 1; }
echo "built $targets in $(( $(date +%s) - t0 )) s"

# The gpu tests (device query, NCCL transport: single, collectives, shared GPU,
# peer that hangs); cases needing more GPUs than present report Skipped.
(cd "$build" && timeout 240 ctest -L gpu --output-on-failure) 2>&1 | tail -40
rc_tests=${PIPESTATUS[0]}

# ncclAllReduce on one GPU (N = 1 is a copy-free call, still a real NCCL
# launch) and across all GPUs when there are several.
for rows in 1024 4096 16384; do  # x 1024 x 4 bytes: 4, 16, 64 MiB
  RANK=0 WORLD_SIZE=1 timeout 60 "$build/bin/merak_nccl_allreduce" --rows $rows --cols 1024 --iters 20
done
if [ "$gpus" -ge 2 ]; then
  # merak's own launcher starts one merak_nccl_allreduce per GPU.
  if timeout 120 cmake --build "$build" -j "$jobs" --target merak >>"$build.build.log" 2>&1; then
    for rows in 1024 4096 16384; do
      timeout 60 "$build/bin/merak" bench allreduce --method nccl --procs "$gpus" --rows $rows --cols 1024 --iters 20
    done
  else
    echo "merak did not build (see $build.build.log); running the workers by hand is not done here"
  fi
fi
echo "gpu_check: tests exit $rc_tests, $(( $(date +%s) - t0 )) s in all"
exit "$rc_tests"
