#include "model/tensor.hpp"

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

void tensor::free_deleter::operator()(std::byte* p) const noexcept {
  std::free(p);
}

tensor::tensor(shape_t shape, dtype type)
    : shape_(std::move(shape)), numel_(shape_numel(shape_)), type_(type) {
  size_t n = bytes();
  if (n == 0) return;
  // aligned_alloc needs a size that is a multiple of the alignment.
  size_t padded = (n + 63) / 64 * 64;
  auto* p = static_cast<std::byte*>(std::aligned_alloc(64, padded));
  if (!p) fail("out of memory allocating a tensor of shape {} ({} bytes)", shape_str(shape_), n);
  data_.reset(p);
}

tensor tensor::zeros(shape_t shape, dtype type) {
  tensor t(std::move(shape), type);
  t.fill_zero();
  return t;
}

tensor tensor::clone() const {
  tensor t(shape_, type_);
  if (bytes()) std::memcpy(t.raw(), raw(), bytes());
  return t;
}

void tensor::fill_zero() {
  if (bytes()) std::memset(raw(), 0, bytes());
}

void tensor::reshape(shape_t shape) {
  MERAK_CHECK(shape_numel(shape) == numel_, "reshape {} -> {}", shape_str(shape_),
              shape_str(shape));
  shape_ = std::move(shape);
}

}  // namespace merak::model
