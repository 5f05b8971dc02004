#pragma once
// Logging set-up. Everything logs through spdlog's default logger, which
// writes to stderr so that stdout stays free for JSON results.

#include <string_view>

namespace merak {

// Sets the default logger to stderr with the given level ("trace", "debug",
// "info", "warn", "error", "off"). Throws merak::error on an unknown level.
// Call once from main, before any actor or thread starts.
void setup_logging(std::string_view level);

}  // namespace merak
