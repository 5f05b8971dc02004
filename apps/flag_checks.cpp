#include "apps/flag_checks.hpp"

#include <charconv>
#include <string>

#include "core/error.hpp"

namespace merak::apps {

CLI::Option* integer_in(CLI::Option* option, int64_t lowest, int64_t highest) {
  const std::string flag = option->get_name();
  auto check = [flag, lowest, highest](std::string& text) {
    int64_t value = 0;
    const char* end = text.data() + text.size();
    const auto [at, ec] = std::from_chars(text.data(), end, value);
    if (text.empty() || ec != std::errc() || at != end || value < lowest || value > highest)
      fail("{} must be an integer from {} to {} (got '{}')", flag, lowest, highest,
           text.size() > 64 ? text.substr(0, 64) + "..." : text);
    text = std::to_string(value);
    return std::string();
  };
  return option->check(CLI::Validator(check, "", "integer_in"));
}

}  // namespace merak::apps
