#pragma once
// Tensors on the host or on a device.
//
// A tensor owns its storage (64-byte aligned host memory, or memory of the
// device it is tagged with) and carries its shape and element type. Tensors
// move (never copy implicitly): passing one between actors in a process
// moves ownership of the buffer. clone() copies on the same device, to()
// onto another. Storage is not initialised unless zeros() is used. Not
// thread-safe: one owner at a time.
//
// data() of a device tensor is a device pointer: only that device's
// backend (model/backend.hpp) and kernels read it. Device memory comes from
// the operations a device library registers (register_device_memory; the
// CUDA ones: gpu/memory.hpp); a tensor on a device nobody registered is an
// error naming it.

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "model/bf16.hpp"

namespace merak::model {

// f32: float; i32: token ids; bf16: bfloat16 (model/bf16.hpp), the
// activations of mixed-precision runs. Values past bf16 are never stored.
enum class dtype : uint8_t { f32, i32, bf16 };
constexpr uint8_t kdtype_count = 3;

size_t dtype_size(dtype t);
const char* dtype_name(dtype t);  // "F32", "I32", "BF16" (safetensors spelling)
bool is_floating(dtype t);

struct device {
  enum class kind : uint8_t { cpu, cuda };
  kind type = kind::cpu;
  int index = 0;
  static device cpu() { return {}; }
  static device cuda(int i) { return {kind::cuda, i}; }
  bool operator==(const device&) const = default;
  std::string str() const;  // "cpu", "cuda:0"
};
// "cpu", "cuda" (device 0) or "cuda:N"; throws merak::error naming the text.
device parse_device(std::string_view text);

// How tensors on one kind of device get, copy and free memory. copy moves
// `bytes` between any two devices of which at least one is of this kind
// (the other may be the host); it has finished when it returns.
struct device_memory_ops {
  void* (*allocate)(size_t bytes, int index);
  void (*release)(void* p, int index) noexcept;
  void (*copy)(void* dst, device dst_device, const void* src, device src_device, size_t bytes);
  void (*zero)(void* p, size_t bytes, int index);
  int (*count)();  // devices of this kind in this process
  // The most memory this process's tensors held at once on device `index`.
  size_t (*peak_bytes)(int index);
  // The native stream every operation on device `index` is ordered on (a
  // cudaStream_t for CUDA), for libraries that enqueue on it (NCCL); null
  // when the kind has none.
  void* (*stream)(int index) = nullptr;
};
// Registers the operations of device kind `k` (once, before tensors of it
// exist; `ops` must outlive them).
void register_device_memory(device::kind k, const device_memory_ops* ops);
// Whether tensors of kind `k` can be made.
bool has_device_memory(device::kind k);
// How many devices of kind `k` this process can use (0 when not registered;
// the host counts as one).
int device_count(device::kind k);
// The most bytes this process's tensors held at once on `d` (0: unknown).
size_t device_peak_bytes(device d);
// device_memory_ops::stream of `d` (null on the host or without one).
void* device_stream(device d);

using shape_t = std::vector<int64_t>;
std::string shape_str(const shape_t& s);  // "(2, 3)"
int64_t shape_numel(const shape_t& s);

class tensor {
 public:
  tensor() = default;
  // Uninitialised storage of the given shape, on the host or on `where`.
  tensor(shape_t shape, dtype type = dtype::f32, device where = device::cpu());
  static tensor zeros(shape_t shape, dtype type = dtype::f32, device where = device::cpu());

  tensor(tensor&& o) noexcept { *this = std::move(o); }
  tensor& operator=(tensor&& o) noexcept {
    data_ = std::move(o.data_);
    shape_ = std::move(o.shape_);
    numel_ = std::exchange(o.numel_, 0);
    type_ = o.type_;
    device_ = o.device_;
    o.shape_.clear();
    return *this;
  }
  tensor(const tensor&) = delete;
  tensor& operator=(const tensor&) = delete;

  tensor clone() const;
  // A copy on device `d` (a clone when it is already there).
  tensor to(device d) const;
  void fill_zero();
  // Reshape in place; the element count must not change.
  void reshape(shape_t shape);

  bool defined() const { return !shape_.empty(); }
  const shape_t& shape() const { return shape_; }
  int64_t dim(int i) const { return shape_[i < 0 ? shape_.size() + i : i]; }
  int rank() const { return int(shape_.size()); }
  int64_t numel() const { return numel_; }
  size_t bytes() const { return size_t(numel_) * dtype_size(type_); }
  dtype type() const { return type_; }
  device where() const { return device_; }

  template <typename T>
  T* data() {
    return reinterpret_cast<T*>(data_.get());
  }
  template <typename T>
  const T* data() const {
    return reinterpret_cast<const T*>(data_.get());
  }
  float* f32() { return data<float>(); }
  const float* f32() const { return data<float>(); }
  std::span<float> span_f32() { return {f32(), size_t(numel_)}; }
  std::span<const float> span_f32() const { return {f32(), size_t(numel_)}; }
  bf16* bf16s() { return data<bf16>(); }
  const bf16* bf16s() const { return data<bf16>(); }
  std::byte* raw() { return data_.get(); }
  const std::byte* raw() const { return data_.get(); }

 private:
  struct free_deleter {
    device where;
    void operator()(std::byte* p) const noexcept;
  };
  std::unique_ptr<std::byte[], free_deleter> data_;
  shape_t shape_;
  int64_t numel_ = 0;
  dtype type_ = dtype::f32;
  device device_;
};

// Copies `bytes` from src at byte `src_offset` to dst at byte `dst_offset`,
// across devices as needed (finished when it returns).
void copy_bytes(tensor& dst, size_t dst_offset, const tensor& src, size_t src_offset, size_t bytes);

}  // namespace merak::model
