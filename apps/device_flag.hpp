#pragma once
// --device for the commands that compute: "cpu", "cuda" or "cuda:N".

#include <string>

#include "model/tensor.hpp"

namespace merak::apps {

// Parses the flag and makes the device usable in this process (CUDA:
// memory and backend registered). Throws merak::error naming the flag when
// the text is not a device, this build has no CUDA, or no CUDA device is
// usable (with the driver's reason).
model::device enable_device(const std::string& text);

}  // namespace merak::apps
