#include "apps/flag_checks.hpp"

#include <charconv>
#include <cmath>
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
           quoted_cut(text, 64));
    text = std::to_string(value);
    return std::string();
  };
  return option->check(CLI::Validator(check, "", "integer_in"));
}

CLI::Option* number_in(CLI::Option* option, double lowest, double highest, bool open_low,
                       const char* zero_means) {
  const std::string flag = option->get_name();
  const std::string zero = zero_means;
  auto check = [flag, lowest, highest, open_low, zero](std::string& text) {
    double value = 0;
    const char* end = text.data() + text.size();
    const auto [at, ec] = std::from_chars(text.data(), end, value);
    const bool read = !text.empty() && ec == std::errc() && at == end && std::isfinite(value);
    const bool in = read && (open_low ? value > lowest : value >= lowest) && value <= highest;
    if (!(in || (read && !zero.empty() && value == 0)))
      fail("{} must be {}a number {} {} {} {} (got '{}')", flag,
           zero.empty() ? std::string() : fmt::format("0 ({}) or ", zero),
           open_low ? "above" : "from", lowest, open_low ? "and at most" : "to", highest,
           quoted_cut(text, 64));
    return std::string();
  };
  return option->check(CLI::Validator(check, "", "number_in"));
}

}  // namespace merak::apps
