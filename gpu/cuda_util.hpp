#pragma once
// CUDA runtime helpers of gpu/: error checks that name the call, each
// device's stream, and scratch memory ordered on it. Included by gpu/ only.

#include <cuda_runtime_api.h>

#include <cstddef>

#include "core/error.hpp"

namespace merak::gpu {

// Throws merak::error naming `what` (the call) and CUDA's message.
void check_cuda(cudaError_t e, const char* what);
#define MERAK_CUDA(call) ::merak::gpu::check_cuda((call), #call)

// Makes `index` the calling thread's current device.
void select_device(int index);

// The stream every operation on device `index` is ordered on (one per
// device and process, so memory freed by one thread is never reused by
// another while in flight).
cudaStream_t stream_of(int index);

// Device memory from the device's stream-ordered pool (cached by the pool
// across frees), released when the scratch goes out of scope.
class scratch {
 public:
  scratch(size_t bytes, int index);
  ~scratch();
  scratch(const scratch&) = delete;
  scratch& operator=(const scratch&) = delete;
  template <typename T>
  T* as() const {
    return static_cast<T*>(p_);
  }

 private:
  void* p_ = nullptr;
  int index_;
};

}  // namespace merak::gpu
