// Config files for the command line: TOML (CLI11's own reader) or JSON.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <sstream>

#include "apps/commands.hpp"
#include "core/error.hpp"

namespace merak::apps {
namespace {

// Reads JSON objects as CLI11 config items: {"layers": 6, "data": "x.txt"}.
// Nested objects become sections ("train": {...} -> train.key).
class json_or_toml_config : public CLI::ConfigTOML {
 public:
  std::vector<CLI::ConfigItem> from_config(std::istream& input) const override {
    std::stringstream ss;
    ss << input.rdbuf();
    std::string text = ss.str();
    auto first = text.find_first_not_of(" \t\r\n");
    if (first == std::string::npos || text[first] != '{') {
      std::istringstream again(text);
      return CLI::ConfigTOML::from_config(again);
    }
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception& e) {
      throw CLI::ConversionError(std::string("config file is not valid JSON: ") + e.what());
    }
    std::vector<CLI::ConfigItem> items;
    add(items, j, {});
    return items;
  }

 private:
  static void add(std::vector<CLI::ConfigItem>& items, const nlohmann::json& j,
                  const std::vector<std::string>& parents) {
    for (auto& [key, value] : j.items()) {
      if (value.is_object()) {
        auto p = parents;
        p.push_back(key);
        add(items, value, p);
        continue;
      }
      CLI::ConfigItem item;
      item.parents = parents;
      item.name = key;
      if (value.is_array())
        for (auto& v : value) item.inputs.push_back(v.is_string() ? v.get<std::string>() : v.dump());
      else if (value.is_string())
        item.inputs = {value.get<std::string>()};
      else
        item.inputs = {value.dump()};
      items.push_back(std::move(item));
    }
  }
};

}  // namespace

void enable_config_file(CLI::App& app) {
  app.set_config("--config", "", "Read flags from a TOML or JSON file (same keys as the flags)");
  app.config_formatter(std::make_shared<json_or_toml_config>());
}

}  // namespace merak::apps
