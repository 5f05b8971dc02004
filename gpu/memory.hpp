#pragma once
// Tensors in CUDA device memory (model/tensor.hpp's device_memory_ops).
//
// Allocation goes through each device's stream-ordered memory pool
// (cudaMallocAsync), which keeps freed blocks for reuse instead of handing
// them back to the driver: the caching allocator a training step needs,
// where the same sizes come and go every micro-batch. Copies and fills are
// ordered on the device's stream (gpu/cuda_util.hpp) and have finished when
// they return.

namespace merak::gpu {

// Registers CUDA memory for model::tensor (idempotent). Throws merak::error
// naming the reason when no CUDA device is usable.
void enable_cuda_memory();

}  // namespace merak::gpu
