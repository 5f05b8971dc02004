#include "core/error.hpp"

namespace merak {

void check_failed(const char* expr, const char* file, int line, const std::string& detail) {
  throw error(fmt::format("internal check failed: {} ({}:{}){}{}", expr, file, line,
                          detail.empty() ? "" : ": ", detail));
}

}  // namespace merak
