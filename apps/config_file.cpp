// Config files for the command line: TOML or JSON with the same keys as the
// flags of the sub-command they follow (`merak train --config run.toml`).
//
// CLI11 2.1 reads config files only for the top-level program, so the file
// is expanded into flags here, before parsing: its values go right after the
// sub-command's name, and flags given on the command line, coming later,
// override them (options take the last value).
#include <toml++/toml.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "apps/commands.hpp"
#include "core/error.hpp"

namespace merak::apps {
namespace {

constexpr int kmax_config_depth = 4;

std::vector<CLI::ConfigItem> json_items(const nlohmann::json& j, const std::string& path) {
  if (!j.is_object()) fail("config file '{}': the top level must be a JSON object", path);
  std::vector<CLI::ConfigItem> items;
  for (auto& [key, value] : j.items()) {
    if (value.is_object())
      fail("config file '{}': key '{}' holds an object (sections are not supported)", path, key);
    CLI::ConfigItem item;
    item.name = key;
    auto scalar = [&](const nlohmann::json& v) {
      if (v.is_structured())
        fail(
            "config file '{}': key '{}' holds a nested {} (values are numbers, strings, "
            "booleans or one list of them)",
            path, item.name, v.is_array() ? "list" : "object");
      return v.is_string() ? v.get<std::string>() : v.dump();
    };
    if (value.is_array())
      for (auto& v : value) item.inputs.push_back(scalar(v));
    else
      item.inputs = {scalar(value)};
    items.push_back(std::move(item));
  }
  return items;
}

// A TOML scalar as the flag's text: strings as they are, numbers and
// booleans as TOML writes them.
std::string toml_scalar(const toml::node& v, const std::string& path, const std::string& key) {
  if (auto s = v.value<std::string>(); s && v.is_string()) return *s;
  if (v.is_integer()) return std::to_string(*v.value<int64_t>());
  if (v.is_floating_point()) return fmt::format("{}", *v.value<double>());
  if (v.is_boolean()) return *v.value<bool>() ? "true" : "false";
  fail(
      "config file '{}': key '{}' holds a {} (values are numbers, strings, booleans or one list "
      "of them)",
      path, key,
      v.is_array()   ? "nested list"
      : v.is_table() ? "table"
                     : "date or time");
}

// The keys of `t` (and of a section, [train] say, one level down, as
// CLI11 reads them: the section is the item's parent).
std::vector<CLI::ConfigItem> toml_items(const toml::table& t, const std::string& path,
                                        const std::string& section = {}) {
  std::vector<CLI::ConfigItem> items;
  for (auto&& [k, v] : t) {
    CLI::ConfigItem item;
    item.name = std::string(k.str());
    if (!section.empty()) item.parents = {section};
    if (const toml::table* sub = v.as_table()) {
      if (!section.empty())
        fail("config file '{}', line {}: [{}.{}] nests sections (one level at most)", path,
             k.source().begin.line, section, item.name);
      auto inner = toml_items(*sub, path, item.name);
      items.insert(items.end(), inner.begin(), inner.end());
      continue;
    }
    if (const toml::array* a = v.as_array())
      for (const toml::node& x : *a) item.inputs.push_back(toml_scalar(x, path, item.name));
    else
      item.inputs = {toml_scalar(v, path, item.name)};
    items.push_back(std::move(item));
  }
  return items;
}

std::vector<CLI::ConfigItem> read_config(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec))
    fail("config file '{}' is {}", path,
         std::filesystem::exists(path, ec) ? "not a regular file" : "missing");
  std::ifstream f(path);
  if (!f) fail("cannot open config file '{}'", path);
  std::stringstream ss;
  ss << f.rdbuf();
  std::string text = ss.str();
  auto first = text.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && text[first] == '{') {
    try {
      // A flag's value nests at most one list deep: refuse deeper nesting
      // while parsing, before it can cost a deep recursion.
      std::set<std::string> keys;  // of the top-level object
      const nlohmann::json::parser_callback_t shallow =
          [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
            if (depth > kmax_config_depth)
              fail("config file '{}' nests values deeper than {} levels", path, kmax_config_depth);
            if (event == nlohmann::json::parse_event_t::key && depth == 1 &&
                !keys.insert(parsed.get<std::string>()).second)
              fail("config file '{}': key '{}' is given twice", path, parsed.get<std::string>());
            return true;
          };
      return json_items(nlohmann::json::parse(text, shallow), path);
    } catch (const nlohmann::json::exception& e) {
      fail("config file '{}' is not valid JSON: {}", path, e.what());
    }
  }
  const auto ext = std::filesystem::path(path).extension();
  if (ext == ".yaml" || ext == ".yml")
    fail("config file '{}': YAML is not read; write it as TOML (key = value) or JSON", path);
  toml::table table;
  try {
    table = toml::parse(text, path);
  } catch (const toml::parse_error& e) {
    const auto& at = e.source().begin;
    fail("config file '{}', line {}, column {}: {} (not valid TOML)", path, at.line, at.column,
         e.description());
  }
  return toml_items(table, path);
}

}  // namespace

std::vector<std::string> expand_config_files(CLI::App& app, std::vector<std::string> args) {
  // Find the sub-command (first argument naming one) and its --config.
  for (size_t i = 0; i < args.size(); ++i) {
    CLI::App* sub = nullptr;
    try {
      sub = app.get_subcommand(args[i]);
    } catch (const CLI::OptionNotFound&) {
      continue;
    }
    // Descend into nested sub-commands (bench gpt ...).
    size_t at = i;
    for (size_t j = i + 1; j < args.size(); ++j) {
      try {
        sub = sub->get_subcommand(args[j]);
        at = j;
      } catch (const CLI::OptionNotFound&) {
        break;
      }
    }
    for (size_t j = at + 1; j < args.size(); ++j) {
      std::string path;
      size_t erase = 0;
      if (args[j] == "--config") {
        if (j + 1 >= args.size()) fail("--config needs a file name");
        path = args[j + 1];
        erase = 2;
      } else if (args[j].rfind("--config=", 0) == 0) {
        path = args[j].substr(9);
        erase = 1;
      } else {
        continue;
      }
      args.erase(args.begin() + long(j), args.begin() + long(j + erase));
      for (size_t k = j; k < args.size(); ++k)
        if (args[k] == "--config" || args[k].rfind("--config=", 0) == 0)
          fail("--config is given twice ('{}' and '{}'): give one file", path,
               args[k] == "--config" && k + 1 < args.size() ? args[k + 1] : args[k].substr(9));
      std::vector<std::string> flags;
      for (auto& item : read_config(path)) {
        if (item.name == "++" || item.name == "--") continue;  // CLI11 section markers
        std::string name = item.parents.empty() ? item.name : item.parents.back() + "." + item.name;
        if (!item.parents.empty() && item.parents.back() == sub->get_name()) name = item.name;
        if (name == "config" || !sub->get_option_no_throw("--" + name))
          fail("config file '{}': unknown key '{}' for 'merak {}'", path, name, sub->get_name());
        // Each value in the --name=value form, so that no value (a string
        // such as "--save") can become a flag of its own; a list only for
        // a flag that takes several values.
        const CLI::Option* opt = sub->get_option_no_throw("--" + name);
        if (item.inputs.size() > 1 && opt->get_items_expected_max() <= 1)
          fail("config file '{}': key '{}' takes one value, not a list of {}", path, name,
               item.inputs.size());
        for (auto& v : item.inputs) flags.push_back("--" + name + "=" + v);
      }
      args.insert(args.begin() + long(at + 1), flags.begin(), flags.end());
      return args;
    }
    return args;
  }
  return args;
}

}  // namespace merak::apps
