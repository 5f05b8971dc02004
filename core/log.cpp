#include "core/log.hpp"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "core/error.hpp"

namespace merak {

void setup_logging(std::string_view level) {
  auto lvl = spdlog::level::from_str(std::string(level));
  if (lvl == spdlog::level::off && level != "off")
    fail("unknown log level '{}' (expected trace, debug, info, warn, error or off)", level);
  auto logger = spdlog::stderr_color_mt("merak");
  logger->set_pattern("[%H:%M:%S.%e] [%^%l%$] %v");
  logger->set_level(lvl);
  spdlog::set_default_logger(logger);
}

}  // namespace merak
