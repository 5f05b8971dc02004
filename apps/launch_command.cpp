// `merak launch`: runs a merak command as the N processes of one job on this
// host, the way torchrun does (comm/launcher.hpp): each process gets RANK,
// WORLD_SIZE, MASTER_ADDR, MASTER_PORT, a job token, LOCAL_RANK and
// LOCAL_WORLD_SIZE. `merak train` in such a job runs one data-parallel
// replica per process, its gradient reducers over UCX.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "apps/commands.hpp"
#include "comm/launcher.hpp"
#include "core/error.hpp"

namespace merak::apps {

namespace {

struct launch_flags {
  int procs = 2;
  double timeout_s = 0;
};

constexpr const char* kabout =
    "Run a merak command as N processes of one job on this host, e.g. merak launch --procs 2 "
    "train --data FILE --dp 2 (one data-parallel replica per process, reducers over UCX)";

void add_flags(CLI::App& c, launch_flags& f) {
  c.add_option("--procs", f.procs, "Processes (ranks) of the job")->capture_default_str();
  c.add_option("--timeout", f.timeout_s, "Seconds the whole job may take (0: no limit)")
      ->capture_default_str();
  c.prefix_command();  // from the first non-flag on, everything is the command's
}

}  // namespace

// Registered for `merak --help` only: main() hands `merak launch ...` to
// run_launch before the sub-commands are parsed, since the launched
// command's own flags must not be parsed here.
action add_launch_command(CLI::App& parent) {
  static launch_flags unused;
  add_flags(*parent.add_subcommand("launch", kabout), unused);
  return [] { return 0; };
}

int run_launch(std::vector<std::string> args) {
  launch_flags f;
  CLI::App app{kabout, "merak launch"};
  add_flags(app, f);
  std::reverse(args.begin(), args.end());  // CLI11 takes them last-first
  try {
    app.parse(args);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  std::vector<std::string> rest = app.remaining();
  if (!rest.empty() && rest.front() == "--") rest.erase(rest.begin());
  if (rest.empty())
    fail("merak launch: no command given (e.g. merak launch --procs 2 train --data FILE --dp 2)");
  if (f.procs < 1) fail("merak launch: --procs must be at least 1 (got {})", f.procs);
  if (f.timeout_s < 0) fail("merak launch: --timeout must not be negative (got {})", f.timeout_s);
  if (rest.front() == "launch") fail("merak launch: the command must not be launch itself");
  comm::launch_options lo;
  lo.procs = f.procs;
  lo.argv.push_back(comm::self_executable());
  lo.argv.insert(lo.argv.end(), rest.begin(), rest.end());
  lo.env["LOCAL_WORLD_SIZE"] = std::to_string(f.procs);
  lo.rank_env = [](int rank, std::map<std::string, std::string>& env) {
    env["LOCAL_RANK"] = std::to_string(rank);
  };
  lo.timeout = std::chrono::milliseconds(int64_t(f.timeout_s * 1000));
  auto r = comm::launch_local(lo);
  if (!r.ok()) fail("merak launch: {}", r.message);
  return 0;
}

}  // namespace merak::apps
