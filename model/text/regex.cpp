#include "model/text/regex.hpp"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "core/error.hpp"

namespace merak::model::text {

namespace {

struct code_deleter {
  void operator()(pcre2_code* c) const { pcre2_code_free(c); }
};
struct match_data_deleter {
  void operator()(pcre2_match_data* m) const { pcre2_match_data_free(m); }
};

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  if (pcre2_get_error_message(code, buffer, sizeof buffer) < 0)
    return "error " + std::to_string(code);
  return reinterpret_cast<const char*>(buffer);
}

}  // namespace

struct unicode_regex::state {
  std::unique_ptr<pcre2_code, code_deleter> code;
  std::string what;
};

unicode_regex::unicode_regex(std::string_view pattern, const std::string& what, bool literal)
    : state_(std::make_unique<state>()) {
  state_->what = what;
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  // PCRE2_LITERAL admits no PCRE2_UCP (it has no classes to apply it to).
  const uint32_t options = PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP);
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   options, &error_code, &error_offset, nullptr);
  if (!code)
    fail("{}: the regular expression does not compile: {} at offset {}", what,
         pcre2_message(error_code), error_offset);
  state_->code.reset(code);
  // Without a JIT (some platforms), pcre2_match interprets: slower, same results.
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
}

unicode_regex::~unicode_regex() = default;
unicode_regex::unicode_regex(unicode_regex&&) noexcept = default;
unicode_regex& unicode_regex::operator=(unicode_regex&&) noexcept = default;

void unicode_regex::find_all(std::string_view subject,
                             std::vector<std::pair<size_t, size_t>>& out) const {
  std::unique_ptr<pcre2_match_data, match_data_deleter> match(
      pcre2_match_data_create_from_pattern(state_->code.get(), nullptr));
  if (!match) fail("{}: out of memory for a regular expression match", state_->what);
  const auto* s = reinterpret_cast<PCRE2_SPTR>(subject.data());
  const size_t n = subject.size();
  size_t start = 0;
  while (start <= n) {
    const int rc =
        pcre2_match(state_->code.get(), s, n, start, PCRE2_NO_UTF_CHECK, match.get(), nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) return;
    if (rc < 0) fail("{}: regular expression match failed: {}", state_->what, pcre2_message(rc));
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match.get());
    const size_t begin = ovector[0], end = ovector[1];
    // \K in a lookahead can report a match that ends before it starts.
    if (end < begin) fail("{}: the regular expression reported a backwards match", state_->what);
    if (end > begin) {
      out.emplace_back(begin, end);
      start = end;
      continue;
    }
    // An empty match: kept (callers drop empty pieces), then one character on.
    out.emplace_back(begin, end);
    if (begin >= n) return;
    start = begin + 1;
    while (start < n && (s[start] & 0xC0) == 0x80) ++start;
  }
}

}  // namespace merak::model::text
