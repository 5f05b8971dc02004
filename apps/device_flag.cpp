#include "apps/device_flag.hpp"

#include <dlfcn.h>

#include <filesystem>
#include <string>
#include <vector>

#include "job/launcher.hpp"
#include "core/error.hpp"

namespace merak::apps {
namespace {

namespace fs = std::filesystem;

// Loads the CUDA module (gpu/plugin.cpp) and enables CUDA devices with it.
// The module is looked for in $MERAK_CUDA_MODULE, beside this program (the
// build tree) and in the installed library folder.
void enable_cuda(const std::string& flag) {
  std::vector<std::string> places;
  if (const char* env = std::getenv("MERAK_CUDA_MODULE")) places.push_back(env);
  const fs::path bin = fs::path(job::self_executable()).parent_path();
  places.push_back((bin / "libmerak_cuda.so").string());
  places.push_back((bin / ".." / MERAK_INSTALL_LIBDIR / "merak" / "libmerak_cuda.so").string());
  std::string tried;
  for (const auto& p : places) {
    if (!fs::exists(p)) {
      tried += (tried.empty() ? "" : ", ") + p;
      continue;
    }
    void* module = ::dlopen(p.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!module) fail("--device {}: cannot load {}: {}", flag, p, ::dlerror());
    using enable_fn = int (*)(char*, size_t);
    auto enable = reinterpret_cast<enable_fn>(::dlsym(module, "merak_cuda_enable"));
    if (!enable) fail("--device {}: {} has no merak_cuda_enable", flag, p);
    char why[512] = {};
    if (enable(why, sizeof why) != 0) fail("--device {}: {}", flag, why);
    return;  // the module stays loaded: the tensors and the backend are its code
  }
  fail("--device {}: this merak was built without CUDA (no CUDA module at {})", flag, tried);
}

}  // namespace

model::device enable_device(const std::string& text) {
  const model::device d = model::parse_device(text);
  if (d.type == model::device::kind::cuda && !model::has_device_memory(d.type)) enable_cuda(text);
  return d;
}

}  // namespace merak::apps
