#pragma once
// Sub-commands of the `merak` program. Each add_* registers its flags on the
// parent and returns the action to run when that sub-command is chosen.

#include <functional>
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace merak::apps {

using action = std::function<int()>;

action add_train_command(CLI::App& parent);
action add_bench_command(CLI::App& parent);
action add_svm_command(CLI::App& parent);
action add_schedule_command(CLI::App& parent);
action add_plan_command(CLI::App& parent);
action add_launch_command(CLI::App& parent);
action add_node_command(CLI::App& parent);
action add_ckpt_command(CLI::App& parent);
action add_report_command(CLI::App& parent);
action add_eval_command(CLI::App& parent);
action add_generate_command(CLI::App& parent);
action add_data_command(CLI::App& parent);

// A sub-command of a command group: its CLI11 sub-command and what runs it
// once it was chosen.
struct subcommand {
  CLI::App* command;
  action run;
};
// The dataset sub-commands of `merak data` (prepare, inspect, ...),
// registered on the `data` group that add_data_command made
// (apps/data_command.cpp holds the call site).
std::vector<subcommand> add_dataset_commands(CLI::App& data);
// `merak launch [--procs N | --hostfile F] ... COMMAND...`: args after "launch".
int run_launch(std::vector<std::string> args);
// `merak node [--procs K --first-rank R --world-size W ...] COMMAND...`: args after "node".
int run_node(std::vector<std::string> args);

// "; did you mean 'X'?" for the nearest of `names` to `word` (an edit
// distance of at most 2, or a third of the word), else "".
std::string suggestion(const std::string& word, const std::vector<std::string>& names);

// Replaces `SUBCOMMAND ... --config FILE` in args (argv without the program
// name) by the flags the TOML or JSON file holds, placed right after the
// sub-command so that later command-line flags override them. Throws
// merak::error naming the file and key for unreadable files or unknown keys.
std::vector<std::string> expand_config_files(CLI::App& app, std::vector<std::string> args);

}  // namespace merak::apps
