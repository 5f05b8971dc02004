#pragma once
// MERAK_INSPECT(T, x.a, x.b, ...) defines the CAF inspect() of struct T over
// the fields listed, under the type name "merak.T": the message structs of
// actors/messages.hpp and actors/svm_messages.hpp. Included only by actors/.

#include <caf/binary_deserializer.hpp>
#include <caf/meta/type_name.hpp>
#include <caf/sec.hpp>

#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#define MERAK_INSPECT(T, ...)                                               \
  template <class Inspector>                                                \
  typename Inspector::result_type inspect(Inspector& f, T& x) {             \
    return f(caf::meta::type_name("merak." #T) __VA_OPT__(, ) __VA_ARGS__); \
  }

namespace merak::actors {

// Raw bytes on the wire (tensor data, SVM vectors): u64 length, then the
// bytes. On load the length is checked against what the message still holds
// before anything is allocated; CAF's own std::vector<char> would resize to
// whatever length a peer announces.
struct wire_bytes {
  std::vector<char> bytes;
};

constexpr uint64_t kmax_wire_bytes = uint64_t{1} << 34;  // 16 GiB: any one message

// The u64 length and raw bytes of a contiguous byte container, the length
// checked before the container grows; to_string shows the length only.
template <class Inspector, class Bytes>
typename Inspector::result_type inspect_byte_block(Inspector& f, Bytes& b) {
  uint64_t n = b.size();
  if constexpr (std::is_void_v<typename Inspector::result_type>) {
    f(n);
    return;
  } else {
    if (auto err = f(n)) return err;
    if constexpr (!Inspector::reads_state) {
      // CAF loads a message through its deserializer base class: ask the
      // object itself how many bytes it still holds.
      uint64_t left = kmax_wire_bytes;
      if (auto* b = dynamic_cast<caf::binary_deserializer*>(&f))
        left = std::min<uint64_t>(left, b->remaining());
      if (n > left) return caf::sec::end_of_stream;
      b.resize(n);
    }
    return n ? f.apply_raw(n, b.data()) : typename Inspector::result_type{};
  }
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, wire_bytes& x) {
  return inspect_byte_block(f, x.bytes);
}

// A std::string field on the wire, bounded on load as wire_bytes is (CAF's
// own string loading resizes first): MERAK_INSPECT(T, text_ref{x.name}).
struct text_ref {
  std::string& s;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, text_ref& x) {
  return inspect_byte_block(f, x.s);
}

}  // namespace merak::actors
