#!/usr/bin/env bash
# One-go check of the CUDA/NCCL parts on a machine with a GPU: configure and build the GPU
# targets, run the tests labelled gpu (the CUDA backend against the CPU
# backend, the NCCL transport), then the benchmarks: whole training steps
# (merak bench gpt --device cuda: tokens/s, MFU, peak memory) and the
# backend's operations (merak_gpu_ops_bench: per-op times, GEMM TFLOP/s) at
# GPT-2 124M and 1.5B, and ncclAllReduce at 4, 16 and 64 MiB (N = 1 always;
# N = number of GPUs when there are several). Prints the test summary and
# one JSON object per benchmark run. Meant to finish in < 8 min on a
# 16-core machine.
#
# A machine that cannot install the project's packages (e.g. one without
# access to a package registry) runs a bundle made here instead
# (bench/gpu_bundle.sh): the same programs, their libraries beside them,
# CUDA's libraries from the machine.
#
# Usage: bench/gpu_check.sh [BUILD_DIR]   (default build-gpu; run from the repo root)
#        bench/gpu_check.sh --bundle FILE (a bench/gpu_bundle.sh archive)
set -uo pipefail
jobs=$(nproc)
t0=$(date +%s)
# The whole check ends within GPU_CHECK_BUDGET_S seconds (default 480): each
# step's limit is cut to what is left, and a step with under 15 s left is
# skipped and named, so a lease of fixed length always gets the summary.
budget=${GPU_CHECK_BUDGET_S:-480}
nvidia-smi -L || echo "nvidia-smi: no GPU listed"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader 2>/dev/null
lscpu 2>/dev/null | grep -E "^Model name" || true
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
echo "gpus=$gpus"

# step LIMIT COMMAND...: runs COMMAND under min(LIMIT, time left), prints
# its exit status, and records failures (exit 77, skipped, is not one).
failed=()
step() {
  local limit=$1
  shift
  local left=$((budget - ($(date +%s) - t0)))
  ((left < limit)) && limit=$left
  if ((limit < 15)); then
    echo "== skipped (time budget): $*"
    failed+=("skipped:$(basename "$1")")
    return
  fi
  echo "== $* (limit ${limit} s)"
  local s0=$(date +%s)
  timeout "$limit" "$@"
  local rc=$?
  echo "== exit $rc after $(($(date +%s) - s0)) s: $(basename "$1")"
  ((rc != 0 && rc != 77)) && failed+=("$(basename "$1")[$rc]")
  return 0
}

# The benchmarks, from the programs in $1: the backend's operations
# (merak_gpu_ops_bench) and whole training steps (merak bench gpt --device
# cuda) at GPT-2 124M (bf16, and fp32 on TF32 against its 494 TFLOP/s), a
# Llama of about 1B and GPT-2 1.5B, then ncclAllReduce on one GPU (N = 1 is a copy-free call, still a
# real NCCL launch) and across all GPUs when there are several.
benchmarks() {
  local bin=$1
  local gpt=(bench gpt --device cuda --seq 1024 --vocab 50304)
  local ops=$bin/merak_gpu_ops_bench
  step 60 "$ops" --layers 12 --dim 768 --heads 12 --batch 16 --precision bf16
  # Attention at T = 2048 and head dimension 128, unfused and fused.
  step 60 "$ops" --layers 1 --dim 2048 --heads 16 --seq 2048 --vocab 32000 --batch 8 --precision bf16
  step 60 env MERAK_CUDA_FUSED_ATTENTION=1 "$ops" --layers 1 --dim 2048 --heads 16 --seq 2048 \
    --vocab 32000 --batch 8 --precision bf16
  step 120 "$bin/merak" "${gpt[@]}" --precision bf16 --layers 12 --dim 768 --heads 12 \
    --batch 16 --steps 5 --warmup-steps 2
  step 120 env MERAK_CUDA_FUSED_ATTENTION=1 "$bin/merak" "${gpt[@]}" --precision bf16 --layers 12 \
    --dim 768 --heads 12 --batch 16 --steps 5 --warmup-steps 2
  # A Llama-3.2-1B-shaped model: 16 layers, C 2048, 32 heads in 8 K/V
  # groups, FFN 8192, a 128256-token vocabulary.
  step 150 "$bin/merak" bench gpt --device cuda --model llama --precision bf16 --layers 16 \
    --dim 2048 --heads 32 --num-query-groups 8 --ffn-hidden-size 8192 --vocab 128256 --seq 1024 \
    --batch 8 --steps 3 --warmup-steps 1
  step 60 "$ops" --layers 48 --dim 1600 --heads 25 --batch 8 --precision bf16
  step 180 "$bin/merak" "${gpt[@]}" --precision bf16 --layers 48 --dim 1600 --heads 25 \
    --batch 8 --steps 3 --warmup-steps 1
  step 60 "$ops" --layers 12 --dim 768 --heads 12 --batch 16 --precision fp32 --peak-tflops 494
  step 120 "$bin/merak" "${gpt[@]}" --precision fp32 --layers 12 --dim 768 --heads 12 \
    --batch 16 --steps 5 --warmup-steps 2 --peak-tflops 494
  for rows in 1024 4096 16384; do  # x 1024 x 4 bytes: 4, 16, 64 MiB
    RANK=0 WORLD_SIZE=1 step 60 "$bin/merak_nccl_allreduce" --rows $rows --cols 1024 --iters 20
  done
  if [ "$gpus" -ge 2 ]; then  # merak's own launcher starts one worker per GPU
    for rows in 1024 4096 16384; do
      step 60 "$bin/merak" bench allreduce --method nccl --procs "$gpus" --rows $rows --cols 1024 --iters 20
    done
  fi
}

if [[ "${1:-}" == "--bundle" ]]; then
  dir=$(mktemp -d)
  tar -C "$dir" -xJf "$2" || { echo "cannot unpack $2"; exit 1; }
  echo "bundle of commit $(cat "$dir/commit" 2>/dev/null)"
  # CUDA's runtime, cuBLASLt and NCCL: the toolkit's folders, else the
  # Python wheels' (nvidia-*-cu13).
  libs="$dir/lib"
  for name in libcudart.so.13 libcublasLt.so.13 libnccl.so.2; do
    found=$(find /usr/local/cuda*/ /usr/lib /opt -name "$name" 2>/dev/null | head -1)
    [[ -n "$found" ]] && libs="$libs:$(dirname "$found")" || echo "not found: $name"
  done
  export LD_LIBRARY_PATH="$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  step 60 "$dir/bin/merak_gpu_tests"
  step 240 "$dir/bin/merak_gpu_backend_tests" ${GPU_CHECK_TEST_FILTER:-}
  cases=("single 1" "shared_gpu 2" "device_collectives 1")
  [[ "$gpus" -ge 2 ]] && cases+=("collectives $gpus" "device_collectives $gpus" "device_links 2")
  for c in "${cases[@]}"; do
    # shellcheck disable=SC2086
    step 60 "$dir/bin/merak_nccl_tests" $c
  done
  rc_tests=${#failed[@]}
  benchmarks "$dir/bin"
  echo "gpu_check (bundle): failed: ${failed[*]:-none}; $(( $(date +%s) - t0 )) s in all"
  exit "$rc_tests"
fi
build=${1:-build-gpu}

timeout 120 cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMERAK_WITH_CUDA=ON \
  -DMERAK_NATIVE=OFF >"$build.configure.log" 2>&1 || {
  echo "configure failed:"; tail -30 "$build.configure.log"; exit 1; }
grep -E "merak: (NCCL|cuda|UCX)" "$build.configure.log"
targets="merak merak_full merak_gpu_tests merak_gpu_backend_tests merak_gpu_ops_bench merak_nccl_tests merak_nccl_allreduce"
timeout 360 cmake --build "$build" -j "$jobs" --target $targets >"$build.build.log" 2>&1 || {
  echo "build failed:"; grep -E "error|Error" "$build.build.log" | head -30; exit 1; }
echo "built $targets in $(( $(date +%s) - t0 )) s"

# The gpu tests (device query, the CUDA backend against the CPU backend, the
# NCCL transport: single, collectives, shared GPU, peer that hangs); cases
# needing more GPUs than present report Skipped.
(cd "$build" && timeout 300 ctest -L gpu --output-on-failure) 2>&1 | tail -40
rc_tests=${PIPESTATUS[0]}
benchmarks "$build/bin"
echo "gpu_check: tests exit $rc_tests, $(( $(date +%s) - t0 )) s in all"
exit "$rc_tests"
