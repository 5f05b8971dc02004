// Config files (`merak train --config FILE`, TOML or JSON) on arbitrary
// text, expanded against a sub-command with options of each kind.
#include <CLI/CLI.hpp>

#include "apps/commands.hpp"
#include "core/error.hpp"
#include "tests/fuzz/fuzz_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const bool json = size > 0 && data[0] == '{';
  merak::fuzz::temp_file f(data, size, json ? ".json" : ".toml");
  CLI::App app;
  auto* train = app.add_subcommand("train");
  int steps = 0;
  double lr = 0;
  std::string save;
  std::vector<int> layout;
  bool verbose = false;
  train->add_option("--steps", steps);
  train->add_option("--lr", lr);
  train->add_option("--save", save);
  train->add_option("--layout", layout);
  train->add_flag("--verbose", verbose);
  try {
    merak::apps::expand_config_files(app, {"train", "--config", f.path()});
  } catch (const merak::error&) {
  }
  return 0;
}
