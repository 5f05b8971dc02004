#include "gpu/memory.hpp"

#include <cuda_runtime_api.h>

#include <cstdint>
#include <mutex>

#include <fmt/format.h>

#include "gpu/cuda_backend.hpp"
#include "gpu/cuda_util.hpp"
#include "gpu/device.hpp"
#include "model/tensor.hpp"

namespace merak::gpu {

void check_cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) fail("{}: {} ({})", what, cudaGetErrorString(e), cudaGetErrorName(e));
}

void select_device(int index) {
  int now = -1;
  MERAK_CUDA(cudaGetDevice(&now));
  if (now != index) MERAK_CUDA(cudaSetDevice(index));
}

namespace {

constexpr int kmax_devices = 64;

struct device_state {
  std::once_flag once;
  cudaStream_t stream = nullptr;
};
device_state devices[kmax_devices];

device_state& state_of(int index) {
  MERAK_CHECK(index >= 0 && index < kmax_devices, "CUDA device index {}", index);
  auto& d = devices[index];
  std::call_once(d.once, [&] {
    select_device(index);
    MERAK_CUDA(cudaStreamCreateWithFlags(&d.stream, cudaStreamNonBlocking));
    // The pool keeps what is freed (no threshold) for the next allocation.
    cudaMemPool_t pool;
    MERAK_CUDA(cudaDeviceGetDefaultMemPool(&pool, index));
    uint64_t keep = UINT64_MAX;
    MERAK_CUDA(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
  });
  return d;
}

void* allocate(size_t bytes, int index) {
  auto& d = state_of(index);
  select_device(index);
  void* p = nullptr;
  cudaError_t e = cudaMallocAsync(&p, bytes, d.stream);
  if (e == cudaErrorMemoryAllocation) {
    cudaGetLastError();  // clear it: the caller names the tensor
    return nullptr;
  }
  check_cuda(e, "cudaMallocAsync");
  return p;
}

void release(void* p, int index) noexcept {
  // Ordered after all work queued on the device's stream, so a kernel still
  // reading the memory finishes first. A failure here has nobody to tell.
  (void)cudaSetDevice(index);
  (void)cudaFreeAsync(p, devices[index].stream);
}

void copy(void* dst, model::device to, const void* src, model::device from, size_t bytes) {
  const bool d_gpu = to.type == model::device::kind::cuda,
             s_gpu = from.type == model::device::kind::cuda;
  const int index = d_gpu ? to.index : from.index;
  auto& d = state_of(index);
  select_device(index);
  const cudaMemcpyKind kind = d_gpu && s_gpu ? cudaMemcpyDeviceToDevice
                              : d_gpu        ? cudaMemcpyHostToDevice
                                             : cudaMemcpyDeviceToHost;
  if (d_gpu && s_gpu && to.index != from.index) {
    MERAK_CUDA(cudaMemcpyPeerAsync(dst, to.index, src, from.index, bytes, d.stream));
  } else {
    MERAK_CUDA(cudaMemcpyAsync(dst, src, bytes, kind, d.stream));
  }
  MERAK_CUDA(cudaStreamSynchronize(d.stream));
}

void zero(void* p, size_t bytes, int index) {
  auto& d = state_of(index);
  select_device(index);
  MERAK_CUDA(cudaMemsetAsync(p, 0, bytes, d.stream));
}

int count() {
  return int(cuda_devices().size());
}

void* native_stream(int index) { return stream_of(index); }

const model::device_memory_ops cuda_ops{allocate, release,          copy,
                                        zero,     count,            peak_device_memory,
                                        native_stream};

}  // namespace

cudaStream_t stream_of(int index) {
  return state_of(index).stream;
}

scratch::scratch(size_t bytes, int index) : index_(index) {
  p_ = allocate(bytes ? bytes : 1, index);
  if (!p_) fail("out of memory on cuda:{}: {} bytes of scratch", index, bytes);
}

scratch::~scratch() {
  release(p_, index_);
}

size_t peak_device_memory(int index) {
  state_of(index);
  cudaMemPool_t pool;
  MERAK_CUDA(cudaDeviceGetDefaultMemPool(&pool, index));
  uint64_t high = 0;
  MERAK_CUDA(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &high));
  return size_t(high);
}

void enable_cuda_memory() {
  if (model::has_device_memory(model::device::kind::cuda)) return;
  if (cuda_devices().empty()) fail("no usable CUDA device: {}", cuda_unavailable_reason());
  model::register_device_memory(model::device::kind::cuda, &cuda_ops);
}

}  // namespace merak::gpu
