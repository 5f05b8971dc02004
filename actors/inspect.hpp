#pragma once
// MERAK_INSPECT(T, x.a, x.b, ...) defines the CAF inspect() of struct T over
// the fields listed, under the type name "merak.T": the message structs of
// actors/messages.hpp and actors/svm_messages.hpp. Included only by actors/.

#include <caf/meta/type_name.hpp>

#define MERAK_INSPECT(T, ...)                                               \
  template <class Inspector>                                                \
  typename Inspector::result_type inspect(Inspector& f, T& x) {             \
    return f(caf::meta::type_name("merak." #T) __VA_OPT__(, ) __VA_ARGS__); \
  }
