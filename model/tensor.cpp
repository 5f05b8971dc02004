#include "model/tensor.hpp"

#include <atomic>
#include <charconv>
#include <cstdlib>
#include <cstring>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.hpp"

namespace merak::model {

size_t dtype_size(dtype t) {
  return t == dtype::bf16 ? 2 : 4;
}

const char* dtype_name(dtype t) {
  switch (t) {
    case dtype::f32:
      return "F32";
    case dtype::i32:
      return "I32";
    case dtype::bf16:
      return "BF16";
  }
  return "?";
}

bool is_floating(dtype t) {
  return t != dtype::i32;
}

std::string device::str() const {
  return type == kind::cpu ? "cpu" : fmt::format("cuda:{}", index);
}

device parse_device(std::string_view text) {
  if (text == "cpu") return device::cpu();
  if (text == "cuda") return device::cuda(0);
  if (text.substr(0, 5) == "cuda:" && text.size() > 5) {
    int i = 0;
    auto [end, ec] = std::from_chars(text.data() + 5, text.data() + text.size(), i);
    if (ec == std::errc() && end == text.data() + text.size() && i >= 0) return device::cuda(i);
  }
  fail("unknown device '{}' (cpu, cuda or cuda:N)", text);
}

std::string shape_str(const shape_t& s) {
  return fmt::format("({})", fmt::join(s, ", "));
}

int64_t shape_numel(const shape_t& s) {
  int64_t n = 1;
  for (auto d : s) {
    if (d < 0) fail("negative dimension in shape {}", shape_str(s));
    n *= d;
  }
  return n;
}

namespace {

// One slot per device kind; the host's is unused (plain aligned memory).
std::atomic<const device_memory_ops*> memory_ops[2];

const device_memory_ops& ops_of(device d) {
  const device_memory_ops* ops = memory_ops[size_t(d.type)].load(std::memory_order_acquire);
  if (!ops) fail("no memory for tensors on {}: this program did not enable that device", d.str());
  return *ops;
}

}  // namespace

void register_device_memory(device::kind k, const device_memory_ops* ops) {
  MERAK_CHECK(k != device::kind::cpu, "the host's memory is built in");
  memory_ops[size_t(k)].store(ops, std::memory_order_release);
}

int device_count(device::kind k) {
  if (k == device::kind::cpu) return 1;
  const device_memory_ops* ops = memory_ops[size_t(k)].load(std::memory_order_acquire);
  return ops ? ops->count() : 0;
}

size_t device_peak_bytes(device d) {
  if (d.type == device::kind::cpu) return 0;
  const device_memory_ops* ops = memory_ops[size_t(d.type)].load(std::memory_order_acquire);
  return ops && ops->peak_bytes ? ops->peak_bytes(d.index) : 0;
}

void* device_stream(device d) {
  if (d.type == device::kind::cpu) return nullptr;
  const device_memory_ops* ops = memory_ops[size_t(d.type)].load(std::memory_order_acquire);
  return ops && ops->stream ? ops->stream(d.index) : nullptr;
}

bool has_device_memory(device::kind k) {
  return k == device::kind::cpu || memory_ops[size_t(k)].load(std::memory_order_acquire);
}

void tensor::free_deleter::operator()(std::byte* p) const noexcept {
  if (where.type == device::kind::cpu)
    std::free(p);
  else
    memory_ops[size_t(where.type)].load(std::memory_order_acquire)->release(p, where.index);
}

tensor::tensor(shape_t shape, dtype type, device where)
    : data_(nullptr, free_deleter{where}),
      shape_(std::move(shape)),
      numel_(shape_numel(shape_)),
      type_(type),
      device_(where) {
  size_t n = bytes();
  if (n == 0) return;
  // aligned_alloc needs a size that is a multiple of the alignment.
  size_t padded = (n + 63) / 64 * 64;
  auto* p = where.type == device::kind::cpu
                ? static_cast<std::byte*>(std::aligned_alloc(64, padded))
                : static_cast<std::byte*>(ops_of(where).allocate(padded, where.index));
  if (!p)
    fail("out of memory allocating a tensor of shape {} ({} bytes) on {}", shape_str(shape_), n,
         where.str());
  data_.reset(p);
}

tensor tensor::zeros(shape_t shape, dtype type, device where) {
  tensor t(std::move(shape), type, where);
  t.fill_zero();
  return t;
}

tensor tensor::clone() const {
  return to(device_);
}

tensor tensor::to(device d) const {
  tensor t(shape_, type_, d);
  if (!bytes()) return t;
  if (d.type == device::kind::cpu && device_.type == device::kind::cpu)
    std::memcpy(t.raw(), raw(), bytes());
  else
    ops_of(d.type != device::kind::cpu ? d : device_).copy(t.raw(), d, raw(), device_, bytes());
  return t;
}

void tensor::fill_zero() {
  if (!bytes()) return;
  if (device_.type == device::kind::cpu)
    std::memset(raw(), 0, bytes());
  else
    ops_of(device_).zero(raw(), bytes(), device_.index);
}

void copy_bytes(tensor& dst, size_t dst_offset, const tensor& src, size_t src_offset,
                size_t bytes) {
  MERAK_CHECK(dst_offset + bytes <= dst.bytes() && src_offset + bytes <= src.bytes(),
              "copy of {} bytes at {} from a tensor of {} into one of {} at {}", bytes, src_offset,
              src.bytes(), dst.bytes(), dst_offset);
  if (!bytes) return;
  const device d = dst.where(), s = src.where();
  if (d.type == device::kind::cpu && s.type == device::kind::cpu)
    std::memcpy(dst.raw() + dst_offset, src.raw() + src_offset, bytes);
  else
    ops_of(d.type != device::kind::cpu ? d : s)
        .copy(dst.raw() + dst_offset, d, src.raw() + src_offset, s, bytes);
}

void tensor::reshape(shape_t shape) {
  MERAK_CHECK(shape_numel(shape) == numel_, "reshape {} -> {}", shape_str(shape_),
              shape_str(shape));
  shape_ = std::move(shape);
}

}  // namespace merak::model
