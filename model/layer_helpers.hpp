#pragma once
// Helpers the layer files (layers.cpp, llama_layers.cpp) share: shapes of
// B x T x features activations, the backend a tensor's device runs, and the
// bytes a graph's activations take.

#include <initializer_list>

#include "core/error.hpp"
#include "model/backend.hpp"
#include "model/graph.hpp"

namespace merak::model::layers::detail {

// B * T of a (B, T, ...) tensor.
inline int64_t rows(const tensor& t) {
  return t.dim(0) * t.dim(1);
}

// (B, T) of `in` followed by the feature shape f.
inline shape_t with_features(const shape_t& in, std::initializer_list<int64_t> f) {
  shape_t s{in.at(0), in.at(1)};
  s.insert(s.end(), f);
  return s;
}

// Throws merak::error naming `what` unless s is (B, T, f).
inline void expect_features(const shape_t& s, int64_t f, const char* what) {
  if (s.size() != 3 || s[2] != f)
    fail("{} expects input (B, T, {}), got {}", what, f, shape_str(s));
}

// The backend of the device a tensor lives on.
inline backend& on(const tensor& t) {
  return backend_for(t.where());
}

constexpr int64_t kF32 = 4;

// Throws merak::error naming `what`, the id and its position unless every
// id is in [0, limit).
inline void check_ids(const tensor& ids, int limit, const char* what) {
  if (ids.where().type != device::kind::cpu) return check_ids(ids.to(device::cpu()), limit, what);
  const int32_t* p = ids.data<int32_t>();
  for (int64_t i = 0; i < ids.numel(); ++i)
    if (p[i] < 0 || p[i] >= limit)
      fail("{} id {} at position {} is outside [0, {})", what, p[i], i, limit);
}

// Bytes of one activation element in this graph.
inline int64_t act(const graph& g) {
  return int64_t(dtype_size(g.activation_type()));
}

}  // namespace merak::model::layers::detail
