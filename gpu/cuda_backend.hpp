#pragma once
// The CUDA backend (model/backend.hpp) for tensors on a CUDA device: the
// kernels of gpu/kernels.hpp and cuBLASLt GEMMs (gpu/gemm.hpp), ordered on
// the device's stream. It is tested operation by operation against the CPU
// backend (tests/gpu/backend_test.cpp).
//
// The attention here is merak's own kernel, which stashes the softmax
// probabilities (B, NH, T, T) as the CPU backend does: the fp32 path and
// the fallback a fused kernel is checked against.

#include <cstddef>
#include <cstdint>

namespace merak::gpu {

// How float GEMMs run: on TF32 tensor cores (the default, as --precision
// fp32 trains on GPUs) or in full float (the tests' reference mode). bf16
// GEMMs always accumulate in float.
enum class gemm_math : uint8_t { tf32, exact };
void set_float_gemm_math(gemm_math m);

// The most device memory this process's tensors held at once on device
// `index` (the memory pool's high-water mark), in bytes.
size_t peak_device_memory(int index);

// Registers CUDA memory and the CUDA backend with model/ (idempotent).
// Throws merak::error naming the reason when no CUDA device is usable.
void enable_cuda();

}  // namespace merak::gpu
