#include "model/tensor_pool.hpp"

namespace merak::model {

tensor tensor_pool::acquire(const shape_t& shape, dtype type, bool zero) {
  int64_t n = shape_numel(shape);
  tensor t;
  auto it = free_.find(n);
  if (it != free_.end() && !it->second.empty()) {
    t = std::move(it->second.back());
    it->second.pop_back();
    cached_bytes_ -= int64_t(t.bytes());
    t.reshape(shape);
    if (t.type() != type) t = tensor(shape, type, where_);
  } else {
    t = tensor(shape, type, where_);
  }
  if (zero) t.fill_zero();
  return t;
}

void tensor_pool::release(tensor&& t) {
  if (!t.defined() || t.numel() == 0) return;
  cached_bytes_ += int64_t(t.bytes());
  free_[t.numel()].push_back(std::move(t));
}

}  // namespace merak::model
