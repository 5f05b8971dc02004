#include "apps/cli_main.hpp"

#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include <malloc.h>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <string>
#include <utility>
#include <vector>

#include "core/error.hpp"
#include "core/files.hpp"
#include "core/log.hpp"

namespace merak::apps {

void keep_large_blocks_in_heap() {
  // Tensors of megabytes are allocated and freed every micro-batch (those that
  // move between actors leave their owner's pool). glibc serves such blocks
  // with mmap and returns them at once, so every allocation page-faults anew;
  // keep them in the heap instead.
  mallopt(M_MMAP_THRESHOLD, 256 << 20);
  mallopt(M_TRIM_THRESHOLD, 512 << 20);
}

int run_cli(int argc, char** argv, const command_entry* commands, int count) {
  CLI::App app{"merak: an actor-model runtime for distributed machine learning"};
  app.require_subcommand(1);
  app.fallthrough();  // global flags (--log-level) may follow the sub-command
  std::string log_level = "info";
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error or off")
      ->capture_default_str();
  bool skip_checksum = false;
  app.add_flag("--skip-checksum", skip_checksum,
               "Load checkpoints and SVM models whose checksum is missing or wrong (every other "
               "check still runs)");
  // Each sub-command registers its flags and returns what to run.
  std::vector<std::pair<const char*, action>> runs;
  for (int i = 0; i < count; ++i) runs.emplace_back(commands[i].name, commands[i].add(app));
  try {
    std::vector<std::string> args(argv + 1, argv + argc);
    args = expand_config_files(app, std::move(args));
    std::reverse(args.begin(), args.end());  // CLI11 takes them last-first
    app.parse(args);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const merak::error& e) {
    std::fprintf(stderr, "merak: error: %s\n", e.what());
    return 1;
  }
  try {
    setup_logging(log_level);
    if (skip_checksum) {
      set_verify_checksums(false);
      spdlog::warn("--skip-checksum: checkpoint and model checksums are not verified");
    }
    for (auto& [name, run] : runs)
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

}  // namespace merak::apps
