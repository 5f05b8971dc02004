// merak: the command-line program. Thin: parses flags, calls the library.
#include <CLI/CLI.hpp>

#include <malloc.h>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <string>

#include "apps/commands.hpp"
#include "core/error.hpp"
#include "core/log.hpp"

int main(int argc, char** argv) {
  // Tensors of megabytes are allocated and freed every micro-batch (those that
  // move between actors leave their owner's pool). glibc serves such blocks
  // with mmap and returns them at once, so every allocation page-faults anew;
  // keep them in the heap instead.
  mallopt(M_MMAP_THRESHOLD, 256 << 20);
  mallopt(M_TRIM_THRESHOLD, 512 << 20);
  CLI::App app{"merak: an actor-model runtime for distributed machine learning"};
  app.require_subcommand(1);
  app.fallthrough();  // global flags (--log-level) may follow the sub-command
  std::string log_level = "info";
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error or off")
      ->capture_default_str();
  namespace ma = merak::apps;
  // Each sub-command registers its flags and returns what to run.
  const std::pair<const char*, ma::action> commands[] = {
      {"train", ma::add_train_command(app)},       {"bench", ma::add_bench_command(app)},
      {"schedule", ma::add_schedule_command(app)}, {"plan", ma::add_plan_command(app)},
      {"svm", ma::add_svm_command(app)},           {"launch", ma::add_launch_command(app)},
      {"node", ma::add_node_command(app)},
  };
  // The launchers' own flags end where the launched command begins: they
  // parse their arguments themselves.
  if (argc > 1 && (std::string(argv[1]) == "launch" || std::string(argv[1]) == "node")) {
    try {
      merak::setup_logging(log_level);
      std::vector<std::string> rest(argv + 2, argv + argc);
      return std::string(argv[1]) == "launch" ? ma::run_launch(rest) : ma::run_node(rest);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "merak: error: %s\n", e.what());
      return 1;
    }
  }
  try {
    std::vector<std::string> args(argv + 1, argv + argc);
    args = merak::apps::expand_config_files(app, std::move(args));
    std::reverse(args.begin(), args.end());  // CLI11 takes them last-first
    app.parse(args);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const merak::error& e) {
    std::fprintf(stderr, "merak: error: %s\n", e.what());
    return 1;
  }
  try {
    merak::setup_logging(log_level);
    for (auto& [name, run] : commands)
      if (app.got_subcommand(name)) return run();
  } catch (const merak::error& e) {
    std::fprintf(stderr, "merak: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "merak: unexpected error: %s\n", e.what());
    return 1;
  }
  return 1;
}
