// The SVM workers' wire messages as CAF's binary deserializer loads them
// from a peer (after the gate authenticated it): the first byte picks the
// message type, the rest is its serialised form. Every length must be
// checked against the bytes that came before anything is allocated.
#include <caf/binary_deserializer.hpp>

#include "actors/svm_messages.hpp"

namespace {

template <class T>
void load(const char* p, size_t n) {
  caf::binary_deserializer bd(static_cast<caf::execution_unit*>(nullptr), p, n);
  caf::deserializer& d = bd;  // as CAF loads a message: through the base class
  T x;
  auto err = d(x);
  (void)err;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  using namespace merak::actors;
  const char* p = reinterpret_cast<const char*>(data) + 1;
  const size_t n = size - 1;
  switch (data[0] % 13) {
    case 0:
      load<svm_local>(p, n);
      break;
    case 1:
      load<svm_dual>(p, n);
      break;
    case 2:
      load<svm_rho>(p, n);
      break;
    case 3:
      load<svm_setup>(p, n);
      break;
    case 4:
      load<svm_eval>(p, n);
      break;
    case 5:
      load<svm_select>(p, n);
      break;
    case 6:
      load<svm_test>(p, n);
      break;
    case 7:
      load<svm_step_reply>(p, n);
      break;
    case 8:
      load<svm_dual_reply>(p, n);
      break;
    case 9:
      load<svm_stats_reply>(p, n);
      break;
    case 10:
      load<svm_select_reply>(p, n);
      break;
    case 11:
      load<svm_margins_reply>(p, n);
      break;
    default:
      load<svm_verdict>(p, n);
      break;
  }
  return 0;
}
