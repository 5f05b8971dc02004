#include "apps/cli_main.hpp"

#include <spdlog/spdlog.h>
#include <CLI/CLI.hpp>

#include <malloc.h>
#include <unistd.h>

#include <fmt/format.h>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <iostream>
#include <new>
#include <sstream>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "apps/version.hpp"
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
  // One arena for every thread. A tensor is often freed on another thread
  // than the one that allocated it (a received activation: the tensor
  // channel's thread allocates it, the stage actor frees it), and glibc
  // unmaps a secondary heap of a per-thread arena as soon as its last chunk
  // is freed, whatever the trim threshold: the next tensor there starts on
  // fresh pages, each paying a page fault (costly on a VM). The main arena
  // keeps its pages; small allocations stay in each thread's cache.
  mallopt(M_ARENA_MAX, 1);
}

namespace {

// What an exception that escaped a command says, in words.
std::string describe(const std::exception& e) {
  if (dynamic_cast<const merak::error*>(&e)) return e.what();
  if (dynamic_cast<const std::bad_alloc*>(&e))
    return fmt::format(
        "out of memory: an allocation failed ({}); the command needs more memory than this "
        "process may use (free memory, ulimit -v)",
        e.what());
  if (const auto* fs = dynamic_cast<const std::filesystem::filesystem_error*>(&e)) {
    std::string paths;
    if (!fs->path1().empty()) paths += " '" + quoted_cut(fs->path1().string()) + "'";
    if (!fs->path2().empty()) paths += " and '" + quoted_cut(fs->path2().string()) + "'";
    return fmt::format("file system operation on{} failed: {}", paths.empty() ? " a path" : paths,
                       fs->code().message());
  }
  if (const auto* sys = dynamic_cast<const std::system_error*>(&e))
    return fmt::format("a system call failed: {} ({} error {})", sys->what(),
                       sys->code().category().name(), sys->code().value());
  return e.what();
}

// Hands `line` to the launcher that started this process, when it asked
// for failures (job/launcher.hpp): "PID LINE\n", one write, so that the
// lines of several ranks never interleave.
void tell_launcher(const std::string& line) {
  const char* fd_text = std::getenv("MERAK_FAILURE_FD");
  if (!fd_text) return;
  const int fd = std::atoi(fd_text);
  if (fd <= STDERR_FILENO) return;
  const std::string note = fmt::format("{} {}\n", ::getpid(), line.substr(0, 3000));
  (void)!::write(fd, note.data(), note.size());
}

}  // namespace

int report_error(const std::exception& e) {
  const std::string line = error_line(describe(e));
  std::fprintf(stderr, "merak: error: %s\n", line.c_str());
  tell_launcher(line);
  return 1;
}

int report_parse_error(CLI::App& app, const CLI::ParseError& e) {
  std::ostringstream err;
  const int status = app.exit(e, std::cout, err);
  std::istringstream lines(err.str());
  for (std::string l; std::getline(lines, l);) std::fprintf(stderr, "%s\n", error_line(l).c_str());
  if (status != 0) tell_launcher(error_line(e.what()));
  return status;
}

namespace {

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] != b[j - 1])});
      diag = up;
    }
  }
  return row[b.size()];
}

}  // namespace

std::string suggestion(const std::string& word, const std::vector<std::string>& names) {
  std::string best;
  size_t best_d = std::max<size_t>(2, word.size() / 3) + 1;
  for (const auto& n : names)
    if (size_t d = edit_distance(word, n); d < best_d) best = n, best_d = d;
  return best.empty() ? std::string() : fmt::format("; did you mean '{}'?", best);
}

namespace {

// Walks the arguments as CLI11 will and names an unknown command or flag
// with the nearest known one, before CLI11 reports what is missing (its
// "--data is required" would hide the typo in "--dat").
void check_names(CLI::App& app, const std::vector<std::string>& args) {
  std::vector<CLI::App*> chain{&app};
  std::string path = "merak";
  bool value_next = false;  // the previous flag takes a value
  for (const auto& t : args) {
    if (t == "--") break;
    CLI::App* cur = chain.back();
    if (t.rfind("--", 0) == 0) {
      const std::string name = t.substr(0, t.find('='));
      if (name == "--config") {  // any sub-command's (expand_config_files)
        value_next = t.find('=') == std::string::npos;
        continue;
      }
      CLI::Option* opt = nullptr;
      for (auto* a : chain)
        if (!opt) opt = a->get_option_no_throw(name);
      if (!opt) {
        std::vector<std::string> known;
        for (auto* a : chain)
          for (auto* o : a->get_options())
            for (const auto& l : o->get_lnames()) known.push_back("--" + l);
        fail("unknown flag '{}' for '{}'{} (see {} --help)", name, path, suggestion(name, known),
             path);
      }
      value_next = t.find('=') == std::string::npos && opt->get_expected_max() > 0;
      continue;
    }
    const bool value = value_next || (t.size() > 1 && t[0] == '-');
    value_next = false;
    if (value) continue;
    std::vector<std::string> subs;
    CLI::App* next = nullptr;
    for (auto* sub : cur->get_subcommands([](CLI::App*) { return true; })) {
      subs.push_back(sub->get_name());
      if (sub->check_name(t)) next = sub;
    }
    if (subs.empty()) continue;  // a positional argument
    if (next) {
      chain.push_back(next);
      path += " " + t;
    } else if (cur->get_require_subcommand_min() > 0) {
      fail("unknown command '{}'{}{} (see {} --help)", t,
           path == "merak" ? std::string() : " for '" + path + "'", suggestion(t, subs), path);
    }
  }
}

}  // namespace

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
  std::string version = version_text();
  version.pop_back();  // CLI11 ends the line itself
  app.set_version_flag("--version", version);
  try {
    std::vector<std::string> args(argv + 1, argv + argc);
    if (args.size() == 1 && args[0] == "version") {
      std::fputs(version_text().c_str(), stdout);
      return 0;
    }
    check_names(app, args);
    args = expand_config_files(app, std::move(args));
    std::reverse(args.begin(), args.end());  // CLI11 takes them last-first
    app.parse(args);
  } catch (const CLI::ParseError& e) {
    return report_parse_error(app, e);
  } catch (const std::exception& e) {
    return report_error(e);
  }
  try {
    setup_logging(log_level);
    if (skip_checksum) {
      set_verify_checksums(false);
      spdlog::warn("--skip-checksum: checkpoint and model checksums are not verified");
    }
    for (auto& [name, run] : runs)
      if (app.got_subcommand(name)) return run();
  } catch (const std::exception& e) {
    return report_error(e);
  }
  return 1;
}

}  // namespace merak::apps
