#pragma once
// Unicode regular expressions through PCRE2 (UTF mode, Unicode properties
// for \d \s \w and POSIX classes), compiled once and JIT-compiled where PCRE2
// has a JIT. An instance is immutable: any number of threads may match with
// it at once (each match allocates its own match data).

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace merak::model::text {

class unicode_regex {
 public:
  // Compiles `pattern` (a PCRE2 pattern, or the literal text itself when
  // `literal`). Throws merak::error naming `what`, PCRE2's message and the
  // offset in the pattern when it does not compile.
  unicode_regex(std::string_view pattern, const std::string& what, bool literal = false);
  ~unicode_regex();
  unicode_regex(unicode_regex&&) noexcept;
  unicode_regex& operator=(unicode_regex&&) noexcept;

  // The [begin, end) byte ranges of the successive non-overlapping matches
  // in `subject`, appended to `out`, as JavaScript's matchAll and Python's
  // finditer find them (an empty match advances by one character).
  // `subject` must be valid UTF-8 (first_invalid_utf8): it is not checked
  // again here. Throws merak::error naming `what` when PCRE2 fails (its
  // match limit on a pathological pattern).
  void find_all(std::string_view subject, std::vector<std::pair<size_t, size_t>>& out) const;

 private:
  struct state;
  std::unique_ptr<state> state_;
};

}  // namespace merak::model::text
