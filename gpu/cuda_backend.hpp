#pragma once
// The CUDA backend (model/backend.hpp) for tensors on a CUDA device: the
// kernels of gpu/kernels.hpp and cuBLASLt GEMMs (gpu/gemm.hpp), ordered on
// the device's stream. It is tested operation by operation against the CPU
// backend (tests/gpu/backend_test.cpp).
//
// Attention runs as batched cuBLASLt GEMMs around merak's own softmax
// kernels and stashes the probabilities (B, NH, T, T), as the CPU backend
// does. A fused forward (gpu/flash_attention.cu: bf16, head sizes 64 and
// 128, a log-sum-exp stash of (B, NH, T)) is off unless enabled: it has not
// yet run on a GPU.

#include <cstddef>
#include <cstdint>

namespace merak::gpu {

// How float GEMMs run: on TF32 tensor cores (the default, as --precision
// fp32 trains on GPUs) or in full float (the tests' reference mode). bf16
// GEMMs always accumulate in float.
enum class gemm_math : uint8_t { tf32, exact };
void set_float_gemm_math(gemm_math m);

// Whether bf16 attention at head sizes 64 and 128 uses the fused forward
// (off by default; MERAK_CUDA_FUSED_ATTENTION=1 in the environment turns it
// on when the module loads). Layers ask the backend for their stash, so set
// this before building a model.
void set_fused_attention(bool on);

// The most device memory this process's tensors held at once on device
// `index` (the memory pool's high-water mark), in bytes.
size_t peak_device_memory(int index);

// Registers CUDA memory and the CUDA backend with model/ (idempotent).
// Throws merak::error naming the reason when no CUDA device is usable.
void enable_cuda();

}  // namespace merak::gpu
