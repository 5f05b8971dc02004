#pragma once
// Range checks attached to integer flags, run on the flag's text before
// CLI11 converts it (CLI11 alone saturates out-of-range values, wraps
// negative ones into unsigned types and reads an empty value as 0).

#include <cstdint>

#include <CLI/CLI.hpp>

namespace merak::apps {

// `option` (an integer flag, from the command line or a config file) must
// hold a decimal integer from `lowest` to `highest`; anything else (empty,
// a fraction, an exponent, out of range) throws merak::error naming the
// flag, the range and the text. An accepted value is rewritten in plain
// decimal (no leading zeros, so CLI11 never reads it as octal).
// Returns `option`.
CLI::Option* integer_in(CLI::Option* option, int64_t lowest, int64_t highest);

// `option` (a floating-point flag) must hold a finite number in the range
// `lowest` to `highest`, `lowest` itself excluded when `open_low`; anything
// else (empty, nan, inf, text, out of range) throws merak::error naming the
// flag, the range and the text. `zero_means` non-empty: 0 is also accepted,
// and the message says what it means ("off"). Returns `option`.
CLI::Option* number_in(CLI::Option* option, double lowest, double highest, bool open_low,
                       const char* zero_means = "");

// The longest duration flag (seconds): a year, which std::chrono and CAF's
// timeouts (nanoseconds in an int64) hold without overflow.
inline constexpr double kmost_seconds = 31536000;

}  // namespace merak::apps
