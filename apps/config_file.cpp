// Config files for the command line: TOML or JSON with the same keys as the
// flags of the sub-command they follow (`merak train --config run.toml`).
//
// CLI11 2.1 reads config files only for the top-level program, so the file
// is expanded into flags here, before parsing: its values go right after the
// sub-command's name, and flags given on the command line, coming later,
// override them (options take the last value).
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>

#include "apps/commands.hpp"
#include "core/error.hpp"

namespace merak::apps {
namespace {

std::vector<CLI::ConfigItem> json_items(const nlohmann::json& j, const std::string& path) {
  if (!j.is_object()) fail("config file '{}': the top level must be a JSON object", path);
  std::vector<CLI::ConfigItem> items;
  for (auto& [key, value] : j.items()) {
    if (value.is_object())
      fail("config file '{}': key '{}' holds an object (sections are not supported)", path, key);
    CLI::ConfigItem item;
    item.name = key;
    if (value.is_array())
      for (auto& v : value) item.inputs.push_back(v.is_string() ? v.get<std::string>() : v.dump());
    else
      item.inputs = {value.is_string() ? value.get<std::string>() : value.dump()};
    items.push_back(std::move(item));
  }
  return items;
}

std::vector<CLI::ConfigItem> read_config(const std::string& path) {
  std::ifstream f(path);
  if (!f) fail("cannot open config file '{}'", path);
  std::stringstream ss;
  ss << f.rdbuf();
  std::string text = ss.str();
  auto first = text.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && text[first] == '{') {
    try {
      return json_items(nlohmann::json::parse(text), path);
    } catch (const nlohmann::json::exception& e) {
      fail("config file '{}' is not valid JSON: {}", path, e.what());
    }
  }
  std::istringstream in(text);
  try {
    return CLI::ConfigTOML().from_config(in);
  } catch (const CLI::Error& e) {
    fail("config file '{}' is not valid TOML: {}", path, e.what());
  }
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
      std::vector<std::string> flags;
      for (auto& item : read_config(path)) {
        if (item.name == "++" || item.name == "--") continue;  // CLI11 section markers
        std::string name = item.parents.empty() ? item.name : item.parents.back() + "." + item.name;
        if (!item.parents.empty() && item.parents.back() == sub->get_name()) name = item.name;
        if (name == "config" || !sub->get_option_no_throw("--" + name))
          fail("config file '{}': unknown key '{}' for 'merak {}'", path, name, sub->get_name());
        if (item.inputs.size() == 1) {
          flags.push_back("--" + name + "=" + item.inputs[0]);
        } else {
          flags.push_back("--" + name);
          flags.insert(flags.end(), item.inputs.begin(), item.inputs.end());
        }
      }
      args.insert(args.begin() + long(at + 1), flags.begin(), flags.end());
      return args;
    }
    return args;
  }
  return args;
}

}  // namespace merak::apps
