#pragma once
// Sub-commands of the `merak` program. Each add_* registers its flags on the
// parent and returns the action to run when that sub-command is chosen.

#include <functional>

namespace CLI {
class App;
}

namespace merak::apps {

using action = std::function<int()>;

action add_train_command(CLI::App& parent);
action add_bench_command(CLI::App& parent);

// Lets `--config FILE` take a TOML or JSON file with the same keys as the
// flags (JSON is detected by a leading '{').
void enable_config_file(CLI::App& app);

}  // namespace merak::apps
