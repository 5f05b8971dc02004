// merak-full: every sub-command of `merak` (the `merak` program runs `svm`
// itself and hands everything else to this one; apps/svm_main.cpp). Thin:
// parses flags, calls the library.
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "apps/cli_main.hpp"
#include "core/error.hpp"
#include "core/log.hpp"

int main(int argc, char** argv) {
  namespace ma = merak::apps;
  ma::keep_large_blocks_in_heap();
  // The launchers' own flags end where the launched command begins: they
  // parse their arguments themselves.
  if (argc > 1 && (std::string(argv[1]) == "launch" || std::string(argv[1]) == "node")) {
    try {
      merak::setup_logging("info");
      std::vector<std::string> rest(argv + 2, argv + argc);
      return std::string(argv[1]) == "launch" ? ma::run_launch(rest) : ma::run_node(rest);
    } catch (const std::exception& e) {
      return ma::report_error(e);
    }
  }
  const ma::command_entry commands[] = {
      {"train", ma::add_train_command},       {"bench", ma::add_bench_command},
      {"schedule", ma::add_schedule_command}, {"plan", ma::add_plan_command},
      {"svm", ma::add_svm_command},           {"launch", ma::add_launch_command},
      {"node", ma::add_node_command},         {"ckpt", ma::add_ckpt_command},
      {"report", ma::add_report_command},     {"eval", ma::add_eval_command},
      {"data", ma::add_data_command},         {"generate", ma::add_generate_command},
  };
  return ma::run_cli(argc, argv, commands, int(std::size(commands)));
}
