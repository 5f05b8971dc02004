#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/files.hpp"
#include "svm/linear_model.hpp"

namespace merak::svm {
namespace {

constexpr const char* kchecksum_line = "checksum crc32c:";       // text: the last line
constexpr const char* kchecksum_key = "\"checksum\":\"crc32c:";  // JSON: a key

// The model file is crash-safe (a new temporary file, fsync'd, renamed) and
// carries its checksum: `text` holds the marker followed by 8 zero digits,
// which are replaced by the CRC-32C of the whole file read with them zeroed.
void write_atomically(const std::string& path, std::string text, const char* marker) {
  const size_t at = text.rfind(marker);
  MERAK_CHECK(at != std::string::npos, "model text without its checksum field");
  const size_t digits = at + std::strlen(marker);
  text.replace(digits - 7, 15, crc_field(text, digits));  // "crc32c:" + 8 digits
  write_file_atomic(path, text);
}

// Verifies the checksum of a model file's text (unless --skip-checksum) and
// returns the text without the text format's checksum line.
std::string verified(std::string text, const std::string& path) {
  if (text.find_first_not_of(" \t\r\n") == std::string::npos) return text;  // empty: said later
  const bool json = text.find_first_not_of(" \t\r\n") != std::string::npos &&
                    text[text.find_first_not_of(" \t\r\n")] == '{';
  const char* marker = json ? kchecksum_key : kchecksum_line;
  size_t at = text.rfind(marker);
  if (!json && at != std::string::npos && at != 0 && text[at - 1] != '\n') at = std::string::npos;
  const size_t digits = at == std::string::npos ? at : at + std::strlen(marker);
  if (verify_checksums()) {
    if (at == std::string::npos)
      fail(
          "model file '{}' has no checksum (not written by merak, or written by an older "
          "version); --skip-checksum loads it anyway",
          path);
    if (digits + 8 > text.size() || text.find(marker) != at)
      fail("model file '{}': its checksum is not where merak writes it", path);
    const std::string want = "crc32c:" + text.substr(digits, 8);
    const std::string got = crc_field(text, digits);
    if (got != want)
      fail(
          "model file '{}' is corrupted: checksum {} does not match the recorded {} "
          "(--skip-checksum loads it anyway)",
          path, got, want);
  }
  if (!json && at != std::string::npos) text.resize(at);
  return text;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot open model file '{}'", path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

double finite_or_fail(double v, const std::string& path, const std::string& where) {
  if (!std::isfinite(v)) fail("model file '{}': {} is not a finite number", path, where);
  return v;
}

linear_model parse_json_model(const std::string& text, const std::string& path) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail("model file '{}' is not valid JSON: {}", path, e.what());
  }
  linear_model m;
  // A count: an integer of the JSON, from 0 to `most` (a float is refused,
  // not converted).
  auto count = [&](const char* key, int64_t most) -> int64_t {
    const auto& v = j.at(key);
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > most)
      fail("model file '{}': key '{}' is {}, not a whole number from 0 to {}", path, key, v.dump(),
           most);
    return v.get<int64_t>();
  };
  try {
    if (j.value("format", std::string()) != "merak-svm-model")
      fail("model file '{}': key 'format' is not \"merak-svm-model\"", path);
    m.pen.kind = parse_penalty_kind(j.at("penalty").get<std::string>());
    m.pen.lambda = j.at("lambda").get<double>();
    m.pen.theta = j.value("theta", 0.0);
    m.b = j.at("bias").get<double>();
    auto w = j.at("weights").get<std::vector<double>>();
    m.w = Eigen::Map<Eigen::VectorXd>(w.data(), int64_t(w.size()));
    if (j.contains("features") && count("features", 2147483647) != m.w.size())
      fail("model file '{}': key 'features' says {} but 'weights' holds {}", path,
           j["features"].get<int64_t>(), m.w.size());
    m.objective = j.value("objective", 0.0);
    m.iterations = j.contains("iterations") ? int(count("iterations", 2147483647)) : 0;
  } catch (const nlohmann::json::exception& e) {
    fail("model file '{}': {}", path, e.what());
  }
  return m;
}

// LIBLINEAR's header (solver_type, nr_class, label, nr_feature, bias), `w`
// and the weights, then merak's own fields, where LIBLINEAR stops reading.
// Files of earlier merak versions, with merak's fields before `w`, and
// LIBLINEAR's own two-class models read too.
linear_model parse_text_model(const std::string& text, const std::string& path) {
  std::istringstream in(text);
  std::string line;
  int64_t line_no = 0, features = -1;
  double bias = -1;        // LIBLINEAR: the bias feature's value; < 0: no bias
  double first_label = 1;  // LIBLINEAR: a positive decision value means this label
  linear_model m;
  auto number = [&](const std::string& s, const char* key) {
    try {
      size_t used = 0;
      double v = std::stod(s, &used);
      if (used != s.size()) throw std::invalid_argument(s);
      return finite_or_fail(v, path, fmt::format("line {} ({})", line_no, key));
    } catch (const std::logic_error&) {
      fail("model file '{}', line {}: '{}' is not a number ({})", path, line_no, s, key);
    }
  };
  // A count: a whole number from 0 to `most` (converted only then).
  auto count = [&](const std::string& s, const char* key, double most) {
    const double v = number(s, key);
    if (!(v >= 0 && v <= most && v == std::floor(v)))
      fail("model file '{}', line {}: {} is '{}', not a whole number from 0 to {}", path, line_no,
           key, s, most);
    return int64_t(v);
  };
  // merak's fields: before `w` (earlier versions) or after the weights.
  auto merak_field = [&](const std::string& key, const std::string& value) {
    if (key == "penalty")
      m.pen.kind = parse_penalty_kind(value);
    else if (key == "lambda")
      m.pen.lambda = number(value, "lambda");
    else if (key == "theta")
      m.pen.theta = number(value, "theta");
    else if (key == "objective")
      m.objective = number(value, "objective");
    else if (key == "iterations")
      m.iterations = int(count(value, "iterations", 2147483647.0));
    else if (key != "merak_fields")
      return false;
    return true;
  };
  bool saw_w = false;
  while (std::getline(in, line)) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    std::istringstream ls(line);
    std::string key, value;
    ls >> key;
    if (key.empty()) continue;
    if (key == "w") {
      saw_w = true;
      break;
    }
    ls >> value;
    if (key == "solver_type") {
      continue;  // LIBLINEAR's solver or merak's: the decision rule is the same
    } else if (key == "nr_class") {
      if (value != "2")
        fail("model file '{}', line {}: nr_class must be 2 (two-class models only)", path, line_no);
    } else if (key == "label") {
      std::string second;
      ls >> second;
      const double a = number(value, "label"), b = number(second, "label");
      if (!((a == 1 && b == -1) || (a == -1 && b == 1)))
        fail("model file '{}', line {}: labels must be 1 and -1", path, line_no);
      first_label = a;
    } else if (key == "nr_feature") {
      features = count(value, "nr_feature", 2147483647.0);
    } else if (key == "bias") {
      bias = number(value, "bias");
    } else if (!merak_field(key, value)) {
      fail("model file '{}', line {}: unknown key '{}'", path, line_no, key);
    }
  }
  if (features < 0 || !saw_w)
    fail("model file '{}': no {} line before the weights", path,
         features < 0 ? "nr_feature" : "'w'");
  std::vector<double> w;
  const int64_t want = features + (bias >= 0 ? 1 : 0);
  while (std::getline(in, line)) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    std::istringstream ls(line);
    std::string key, value;
    if (!(ls >> key)) continue;
    const bool numeric = key.find_first_not_of("0123456789+-.eE") == std::string::npos ||
                         key == "nan" || key == "inf" || key == "-inf";
    if (numeric) {
      if (int64_t(w.size()) == want)
        fail("model file '{}': more than the {} weights of nr_feature {}{} (line {})", path, want,
             features, bias >= 0 ? " plus the bias" : "", line_no);
      w.push_back(number(key, "weight"));
      continue;
    }
    if (int64_t(w.size()) != want) number(key, "weight");  // a weight is missing: says why
    ls >> value;
    if (!merak_field(key, value))
      fail("model file '{}', line {}: unknown key '{}' after the weights", path, line_no, key);
  }
  if (int64_t(w.size()) != want)
    fail("model file '{}': {} weights after 'w', expected {} (nr_feature {}{})", path, w.size(),
         want, features, bias >= 0 ? " plus the bias" : "");
  m.w = Eigen::Map<Eigen::VectorXd>(w.data(), features);
  m.b = bias >= 0 ? w.back() * bias : 0.0;
  if (first_label < 0) {  // LIBLINEAR's "label -1 1": a positive value means -1
    m.w = -m.w;
    m.b = -m.b;
  }
  return m;
}

}  // namespace

void write_model_text(const linear_model& m, const std::string& path) {
  // LIBLINEAR reads up to the last weight and ignores the rest: its
  // predict loads the file, and merak's fields follow the weights. The
  // solver name is one LIBLINEAR knows (its predict does not depend on it).
  std::string s = "solver_type L1R_L2LOSS_SVC\nnr_class 2\nlabel 1 -1\n";
  s += fmt::format("nr_feature {}\nbias 1\nw\n", m.w.size());
  for (int64_t j = 0; j < m.w.size(); ++j) s += fmt::format("{:.17g}\n", m.w[j]);
  s += fmt::format("{:.17g}\n", m.b);
  s += fmt::format("merak_fields 1\npenalty {}\nlambda {:.17g}\ntheta {:.17g}\n",
                   penalty_name(m.pen.kind), m.pen.lambda, m.pen.theta);
  s += fmt::format("objective {:.17g}\niterations {}\n", m.objective, m.iterations);
  s += std::string(kchecksum_line) + "00000000\n";
  write_atomically(path, s, kchecksum_line);
}

void write_model_json(const linear_model& m, const std::string& path) {
  nlohmann::json j{{"format", "merak-svm-model"},
                   {"penalty", penalty_name(m.pen.kind)},
                   {"lambda", m.pen.lambda},
                   {"theta", m.pen.theta},
                   {"features", m.w.size()},
                   {"bias", m.b},
                   {"objective", m.objective},
                   {"iterations", m.iterations},
                   {"nnz", m.nnz()},
                   {"weights", std::vector<double>(m.w.data(), m.w.data() + m.w.size())},
                   {"checksum", "crc32c:00000000"}};
  write_atomically(path, j.dump() + "\n", kchecksum_key);
}

void write_model(const linear_model& m, const std::string& path) {
  if (path.size() >= 5 && path.compare(path.size() - 5, 5, ".json") == 0)
    write_model_json(m, path);
  else
    write_model_text(m, path);
}

linear_model read_model(const std::string& path) {
  std::string text = verified(slurp(path), path);
  size_t first = text.find_first_not_of(" \t\r\n");
  if (first == std::string::npos) fail("model file '{}' is empty", path);
  linear_model m = text[first] == '{' ? parse_json_model(text, path) : parse_text_model(text, path);
  try {
    m.pen.validate();
  } catch (const error& e) {
    fail("model file '{}': {}", path, e.what());
  }
  return m;
}

}  // namespace merak::svm
