#include "apps/device_flag.hpp"

#include "core/error.hpp"

#ifdef MERAK_WITH_CUDA
#include "gpu/cuda_backend.hpp"
#endif

namespace merak::apps {

model::device enable_device(const std::string& text) {
  const model::device d = model::parse_device(text);
  if (d.type == model::device::kind::cuda) {
#ifdef MERAK_WITH_CUDA
    try {
      gpu::enable_cuda();
    } catch (const std::exception& e) {
      fail("--device {}: {}", text, e.what());
    }
#else
    fail("--device {}: this merak was built without CUDA (configure where the CUDA toolkit is)",
         text);
#endif
  }
  return d;
}

}  // namespace merak::apps
