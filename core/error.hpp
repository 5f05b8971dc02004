#pragma once
// Errors with context.
//
// merak reports bad input (files, flags, checkpoints, peers) as a
// merak::error whose message names what is wrong and where: the file and
// line, the flag, the field, the peer or rank. Library code throws it; the
// command line and the actors catch it at their boundary and turn it into a
// one-line message and a non-zero exit (or an actor exit reason). Broken
// internal invariants use MERAK_CHECK, which also throws, so that a bug in
// one actor ends the run with a message rather than an abort.

#include <fmt/format.h>

#include <cstddef>
#include <stdexcept>
#include <string>
#include <string_view>

namespace merak {

class error : public std::runtime_error {
 public:
  explicit error(std::string what) : std::runtime_error(std::move(what)) {}
};

// Throws merak::error with a fmt-formatted message.
template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
  throw error(fmt::format(format, std::forward<Args>(args)...));
}

// `value` as a message quotes it: whole when it has at most `most` bytes,
// else its first `most` bytes (never half a UTF-8 character) and
// "... (N bytes)". For values from users and files, which can be of any size.
std::string quoted_cut(std::string_view value, size_t most = 80);

// One line of an error for a terminal: control characters (a newline, an
// ANSI escape) shown as \xNN, and a line longer than `most` bytes cut in
// the middle ("[N bytes cut]"), keeping its start and its end, which
// together say what failed and why.
std::string error_line(std::string_view text, size_t most = 400);

[[noreturn]] void check_failed(const char* expr, const char* file, int line,
                               const std::string& detail);

}  // namespace merak

// Internal invariant; the message carries the source location.
#define MERAK_CHECK(cond, ...)                                                                    \
  do {                                                                                            \
    if (!(cond)) ::merak::check_failed(#cond, __FILE__, __LINE__, ::fmt::format("" __VA_ARGS__)); \
  } while (0)
