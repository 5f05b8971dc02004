// Hugging Face config.json and model.safetensors.index.json parsing on
// arbitrary text: fields of every type, unknown architectures, weight maps
// with paths. Either parser may refuse (merak::error), never crash.
#include <string>

#include "core/error.hpp"
#include "model/hf_checkpoint.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    merak::model::parse_hf_config(text, "config.json");
  } catch (const merak::error&) {
  }
  try {
    merak::model::parse_hf_index(text, "model.safetensors.index.json");
  } catch (const merak::error&) {
  }
  return 0;
}
