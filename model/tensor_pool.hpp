#pragma once
// A free list of tensors of one device keyed by element count.
//
// Activations and their gradients are the same sizes every step; taking them
// from a pool instead of malloc avoids mapping and page-faulting hundreds of
// megabytes per step (glibc serves large blocks with mmap). Single-threaded:
// one owner (an executor or a stage actor).

#include <map>
#include <vector>

#include "model/tensor.hpp"

namespace merak::model {

class tensor_pool {
 public:
  explicit tensor_pool(device where = device::cpu()) : where_(where) {}
  device where() const { return where_; }
  // A tensor of this shape; contents undefined unless zero is set.
  tensor acquire(const shape_t& shape, dtype type, bool zero);
  void release(tensor&& t);
  int64_t cached_bytes() const { return cached_bytes_; }

 private:
  device where_;
  std::map<int64_t, std::vector<tensor>> free_;
  int64_t cached_bytes_ = 0;
};

}  // namespace merak::model
