// `merak data ...`: text to token ids and back, with Megatron-LM's tokenizer
// flags (apps/tokenizer_flags.hpp, docs/tokenizers.md).
//
//   merak data tokenize FILE [tokenizer flags] [--json] [--lines]   ids on stdout
//   merak data detokenize [FILE|-] [tokenizer flags]      text on stdout
#include <CLI/CLI.hpp>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <sstream>

#include <nlohmann/json.hpp>

#include "apps/commands.hpp"
#include "apps/tokenizer_flags.hpp"
#include "core/error.hpp"
#include "core/files.hpp"

namespace merak::apps {

namespace {

// All of `path` ("-": standard input).
std::string read_input(const std::string& path) {
  if (path == "-") {
    std::ostringstream all;
    all << std::cin.rdbuf();
    return all.str();
  }
  check_input_file(path, "input");
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot open: {}", path, std::strerror(errno));
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_stdout(std::string_view text) {
  if (std::fwrite(text.data(), 1, text.size(), stdout) != text.size() || std::fflush(stdout) != 0)
    fail("standard output: write failed");
}

// `merak data tokenize FILE`.
subcommand add_tokenize(CLI::App& data) {
  struct flags {
    model::text::tokenizer_options tokenizer;
    std::string input;
    bool json = false;
    bool lines = false;
  };
  auto f = std::make_shared<flags>();
  auto* t = data.add_subcommand("tokenize", "Print the token ids of a text file");
  t->add_option("file", f->input, "UTF-8 text (-: standard input)")->required();
  add_tokenizer_flags(*t, f->tokenizer);
  t->add_flag("--json", f->json, "A JSON array instead of space-separated ids");
  t->add_flag("--lines", f->lines,
              "Each line on its own (without its line feed): a line of ids per line, as "
              "spm_encode prints them");
  return {t, [f] {
            const auto tokenizer = model::text::make_tokenizer(f->tokenizer);
            const std::string text = read_input(f->input);
            std::vector<std::string_view> parts;
            if (f->lines) {
              for (size_t at = 0; at < text.size();) {
                size_t end = text.find('\n', at);
                if (end == std::string::npos) end = text.size();
                parts.push_back(std::string_view(text).substr(at, end - at));
                at = end + 1;
              }
            } else {
              parts.push_back(text);
            }
            std::string out;
            for (size_t p = 0; p < parts.size(); ++p) {
              std::vector<int32_t> ids;
              try {
                ids = tokenizer->encode(parts[p]);
              } catch (const error& e) {
                if (f->lines) fail("{} line {}: {}", f->input, p + 1, e.what());
                fail("{}: {}", f->input, e.what());
              }
              if (f->json) {
                out += nlohmann::json(ids).dump();
              } else {
                for (size_t i = 0; i < ids.size(); ++i) {
                  if (i) out += ' ';
                  out += std::to_string(ids[i]);
                }
              }
              out += '\n';
            }
            write_stdout(out);
            return 0;
          }};
}

// The ids of `text`: integers separated by white space, or a JSON array.
std::vector<int32_t> parse_ids(const std::string& text, const std::string& where) {
  std::vector<int32_t> ids;
  const size_t first = text.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && text[first] == '[') {
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(text);
    } catch (const nlohmann::json::parse_error& e) {
      fail("{}: not valid JSON at byte {}", where, e.byte);
    }
    if (!j.is_array()) fail("{}: expected a JSON array of ids", where);
    for (size_t i = 0; i < j.size(); ++i) {
      if (!j[i].is_number_integer() || j[i].get<int64_t>() < INT32_MIN ||
          j[i].get<int64_t>() > INT32_MAX)
        fail("{}: element {} is not a 32-bit integer id", where, i);
      ids.push_back(j[i].get<int32_t>());
    }
    return ids;
  }
  size_t at = 0, index = 0;
  while (at < text.size()) {
    at = text.find_first_not_of(" \t\r\n", at);
    if (at == std::string::npos) break;
    size_t end = text.find_first_of(" \t\r\n", at);
    if (end == std::string::npos) end = text.size();
    const std::string word = text.substr(at, end - at);
    size_t used = 0;
    long long value = 0;
    try {
      value = std::stoll(word, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != word.size() || value < INT32_MIN || value > INT32_MAX)
      fail("{}: id {} (byte offset {}) is not an integer: '{}'", where, index, at,
           word.substr(0, 40));
    ids.push_back(int32_t(value));
    ++index;
    at = end;
  }
  return ids;
}

// `merak data detokenize [FILE|-]`.
subcommand add_detokenize(CLI::App& data) {
  struct flags {
    model::text::tokenizer_options tokenizer;
    std::string input = "-";
  };
  auto f = std::make_shared<flags>();
  auto* d = data.add_subcommand("detokenize",
                                "Print the text of token ids (space-separated, or a JSON array)");
  d->add_option("file", f->input, "The ids (-: standard input)")->capture_default_str();
  add_tokenizer_flags(*d, f->tokenizer);
  return {d, [f] {
            const auto tokenizer = model::text::make_tokenizer(f->tokenizer);
            const std::string where = f->input == "-" ? "standard input" : f->input;
            const std::vector<int32_t> ids = parse_ids(read_input(f->input), where);
            std::string text;
            try {
              text = tokenizer->decode(ids);
            } catch (const error& e) {
              fail("{}: {}", where, e.what());
            }
            write_stdout(text);
            return 0;
          }};
}

}  // namespace

action add_data_command(CLI::App& parent) {
  auto* d = parent.add_subcommand("data", "Tokenize text and prepare training data");
  d->require_subcommand(1);
  std::vector<subcommand> commands{add_tokenize(*d), add_detokenize(*d)};
  // The dataset sub-commands (prepare, inspect: dataset_command.cpp).
  for (auto& c : add_dataset_commands(*d)) commands.push_back(c);
  return [d, commands] {
    for (const auto& c : commands)
      if (d->got_subcommand(c.command)) return c.run();
    return 0;
  };
}

}  // namespace merak::apps
