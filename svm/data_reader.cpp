#include "svm/data_reader.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <utility>
#include <vector>

#include "core/error.hpp"
#include "core/files.hpp"

namespace merak::svm {
namespace {

std::string slurp(const std::string& path) {
  check_input_file(path, "data file");
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) fail("cannot open data file '{}'", path);
  const std::streamoff size = in.tellg();
  std::string text;
  if (size > 0) {  // one read into place; not a regular file (a pipe): a stream copy
    text.resize(size_t(size));
    in.seekg(0);
    if (in.read(text.data(), size)) return text;
    in.clear();
  }
  in.seekg(0);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\r';
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

// `s` quoted for an error message, at most 40 of its characters (a field
// of a file read in the wrong format can be a line of tens of kilobytes).
std::string shown(std::string_view s) {
  if (s.size() <= 40) return fmt::format("'{}'", s);
  return fmt::format("'{}...' ({} bytes)", s.substr(0, 40), s.size());
}

// Parses all of `s` as a finite double (decimal, as strtod in the C
// locale, without hexadecimal forms), or fails naming `what` (with
// `field`: "field N").
double parse_number(std::string_view s, const std::string& file, int64_t line, const char* what,
                    int64_t field = -1) {
  s = trim(s);
  const auto name = [&] { return field < 0 ? std::string(what) : fmt::format("field {}", field); };
  if (s.empty()) fail("{}:{}: empty {}", file, line, name());
  // from_chars: no allocation, no locale; it rejects a leading '+'.
  std::string_view digits = s.size() > 1 && s[0] == '+' && s[1] != '-' ? s.substr(1) : s;
  double v = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v);
  if (ec == std::errc::invalid_argument || end != digits.data() + digits.size())
    fail("{}:{}: {} {} is not a number", file, line, name(), shown(s));
  if (ec == std::errc::result_out_of_range || !std::isfinite(v)) {
    // from_chars also calls a value that underflows out of range; strtod's
    // rule: a subnormal or zero result of a non-zero number is kept.
    char* stop = nullptr;
    errno = 0;
    const std::string tmp(digits);
    v = std::strtod(tmp.c_str(), &stop);
    if (!std::isfinite(v) || (errno == ERANGE && std::abs(v) > 1))
      fail("{}:{}: {} {} is not finite", file, line, name(), shown(s));
  }
  return v;
}

// True when `s` starts like a number (a sign, a digit or a point).
bool looks_numeric(std::string_view s) {
  s = trim(s);
  if (!s.empty() && (s[0] == '+' || s[0] == '-')) s.remove_prefix(1);
  return !s.empty() && (std::isdigit(static_cast<unsigned char>(s[0])) || s[0] == '.');
}

double parse_label(std::string_view s, const std::string& file, int64_t line) {
  double v = parse_number(s, file, line, "label");
  if (v == 1) return 1;
  if (v == -1 || v == 0) return -1;
  fail("{}:{}: label {} is not +1 or -1 (two-class data only)", file, line, shown(trim(s)));
}

// A line of CSV: commas, and no ':' (LIBSVM's index:value).
bool line_is_csv(std::string_view l) {
  return l.find(',') != std::string_view::npos && l.find(':') == std::string_view::npos;
}

template <typename F>
void for_each_line(std::string_view text, F&& f) {
  int64_t line = 0;
  while (!text.empty()) {
    size_t e = text.find('\n');
    std::string_view l = text.substr(0, e);
    ++line;
    if (!trim(l).empty()) f(l, line);
    if (e == std::string_view::npos) break;
    text.remove_prefix(e + 1);
  }
}

void check_not_empty(const dataset& d) {
  if (d.rows() == 0) fail("data file '{}' holds no samples", d.name);
}

}  // namespace

data_format parse_data_format(std::string_view name, const std::string& path) {
  if (name == "libsvm") return data_format::libsvm;
  if (name == "csv") return data_format::csv;
  if (name == "auto" || name.empty())
    return path.size() >= 4 && path.compare(path.size() - 4, 4, ".csv") == 0 ? data_format::csv
                                                                             : data_format::libsvm;
  fail("unknown --format '{}' (expected libsvm, csv or auto)", name);
}

namespace {

// `text` without a leading UTF-8 byte-order mark (spreadsheet programs
// write one): the mark is not part of the first line's first field.
std::string_view without_byte_order_mark(std::string_view text) {
  constexpr std::string_view mark = "\xEF\xBB\xBF";
  if (text.substr(0, mark.size()) == mark) text.remove_prefix(mark.size());
  return text;
}

}  // namespace

// Feature indices as LIBLINEAR reads them (a C int): a larger one is a
// corrupt or hostile file, and every fit holds several dense vectors of the
// feature count.
constexpr int64_t kmax_feature_index = 2147483647;

dataset parse_libsvm(std::string_view text, const std::string& name, int64_t min_features) {
  text = without_byte_order_mark(text);
  // The rows arrive in order with ascending indices (checked below): the
  // CSR arrays are built as read, with room for one entry per ':'.
  std::vector<int64_t> outer{0}, inner;
  std::vector<double> values, labels;
  const auto colons = size_t(std::count(text.begin(), text.end(), ':'));
  inner.reserve(colons);
  values.reserve(colons);
  int64_t p = min_features;
  for_each_line(text, [&](std::string_view l, int64_t line) {
    if (line_is_csv(l))
      fail(
          "{}:{}: commas and no index:value pairs: this looks like CSV, read as LIBSVM text "
          "(give --format csv, or name the file .csv)",
          name, line);
    size_t pos = 0;
    auto next_token = [&]() -> std::string_view {
      while (pos < l.size() && is_space(l[pos])) ++pos;
      size_t s = pos;
      while (pos < l.size() && !is_space(l[pos])) ++pos;
      return l.substr(s, pos - s);
    };
    labels.push_back(parse_label(next_token(), name, line));
    int64_t last = 0;
    for (std::string_view tok = next_token(); !tok.empty(); tok = next_token()) {
      if (tok.front() == '#') break;  // trailing comment
      size_t colon = tok.find(':');
      if (colon == std::string_view::npos)
        fail("{}:{}: {} is not index:value", name, line, shown(tok));
      std::string_view is = tok.substr(0, colon);
      int64_t idx = 0;
      auto [ptr, ec] = std::from_chars(is.data(), is.data() + is.size(), idx);
      if (ec != std::errc() || ptr != is.data() + is.size())
        fail("{}:{}: feature index {} is not an integer", name, line, shown(is));
      if (idx < 1)
        fail("{}:{}: feature index {} is below 1 (indices are 1-based)", name, line, idx);
      if (idx > kmax_feature_index)
        fail("{}:{}: feature index {} is above the largest supported, {}", name, line, idx,
             kmax_feature_index);
      if (idx <= last)
        fail("{}:{}: feature index {} does not follow {} (indices must ascend)", name, line, idx,
             last);
      last = idx;
      double v = parse_number(tok.substr(colon + 1), name, line, "feature value");
      if (v != 0) inner.push_back(idx - 1), values.push_back(v);
      p = std::max(p, idx);
    }
    outer.push_back(int64_t(inner.size()));
  });
  dataset d;
  d.name = name;
  const int64_t n = int64_t(labels.size());
  sparse_matrix x = Eigen::Map<const sparse_matrix>(n, p, int64_t(inner.size()), outer.data(),
                                                    inner.data(), values.data());
  d.x = design_matrix(std::move(x));
  d.y = Eigen::Map<Eigen::VectorXd>(labels.data(), n);
  check_not_empty(d);
  return d;
}

dataset parse_csv(std::string_view text, const std::string& name, int64_t min_features) {
  text = without_byte_order_mark(text);
  std::vector<double> values, labels;
  int64_t fields = -1;
  bool first = true;
  for_each_line(text, [&](std::string_view l, int64_t line) {
    // A header row: the first line, its first field not a number (a column
    // name such as "label"). Its field count must match the data's.
    if (std::exchange(first, false) && !looks_numeric(l.substr(0, l.find(',')))) {
      fields = int64_t(std::count(l.begin(), l.end(), ',')) + 1;
      return;
    }
    int64_t count = 0;
    size_t s = 0;
    while (true) {
      size_t e = l.find(',', s);
      std::string_view f =
          l.substr(s, e == std::string_view::npos ? std::string_view::npos : e - s);
      ++count;
      if (count == 1) {
        labels.push_back(parse_label(f, name, line));
      } else {
        values.push_back(parse_number(f, name, line, "field", count));
      }
      if (e == std::string_view::npos) break;
      s = e + 1;
    }
    if (fields < 0) fields = count;
    if (count != fields)
      fail("{}:{}: {} fields where earlier lines (or the header) have {}", name, line, count,
           fields);
    if (count < 2) fail("{}:{}: a label but no features", name, line);
  });
  dataset d;
  d.name = name;
  const int64_t n = int64_t(labels.size()), p = std::max<int64_t>(fields - 1, 0);
  dense_matrix x = dense_matrix::Zero(n, std::max(p, min_features));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < p; ++j) x(i, j) = values[size_t(i * p + j)];
  d.x = design_matrix(std::move(x));
  d.y = Eigen::Map<Eigen::VectorXd>(labels.data(), n);
  check_not_empty(d);
  return d;
}

dataset read_libsvm(const std::string& path, int64_t min_features) {
  return parse_libsvm(slurp(path), path, min_features);
}

dataset read_csv(const std::string& path, int64_t min_features) {
  return parse_csv(slurp(path), path, min_features);
}

dataset read_data(const std::string& path, data_format f, int64_t min_features) {
  return f == data_format::csv ? read_csv(path, min_features) : read_libsvm(path, min_features);
}

}  // namespace merak::svm
