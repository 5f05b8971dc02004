// `merak launch` and `merak node`: run a merak command as the processes of
// one job (job/launcher.hpp). Each process gets RANK, WORLD_SIZE,
// MASTER_ADDR, MASTER_PORT, a job token, LOCAL_RANK and LOCAL_WORLD_SIZE;
// `merak train` in such a job places its stage actors on the processes
// (docs/launch.md). `--max-restarts K` restarts a failed job from the latest
// checkpoint of its --save directory.
//
//   merak launch --procs N COMMAND...       N processes on this host
//   merak launch --hostfile F COMMAND...    `merak node` on every host of F,
//                                           started through ssh (--rsh)
//   merak node --procs K --first-rank R --world-size W --master-addr A
//              --master-port P --token T COMMAND...
//                                           this host's K ranks of a job of
//                                           W (by hand, or from a launcher)
//
// A launcher hands each node its job token and forwarded variables on the
// node's stdin (`--from-launcher`), never on a command line that `ps` shows,
// and keeps that stream open: when the launcher (or its ssh) goes away the
// node reads end of file and kills its ranks.
#include <unistd.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "apps/commands.hpp"
#include "apps/tls_flags.hpp"
#include "job/auth.hpp"
#include "job/bootstrap.hpp"
#include "job/launcher.hpp"
#include "core/error.hpp"

namespace merak::apps {

namespace {

// The program the launched processes run: `merak` beside this one (which
// runs `svm` without the training libraries and hands the rest to
// merak-full), else this program.
std::string merak_program() {
  const std::string self = job::self_executable();
  const std::string merak = std::filesystem::path(self).parent_path() / "merak";
  return ::access(merak.c_str(), X_OK) == 0 ? merak : self;
}

struct launch_flags {
  int procs = 2;
  // torchrun's multi-node form: this host is node `node_rank` of `nnodes`,
  // each running `procs` ranks; rank 0 listens at `rdzv_endpoint`.
  int nnodes = 1;
  int node_rank = 0;
  std::string rdzv_endpoint;
  std::string rdzv_id;
  std::string token, token_file;
  int max_restarts = 0;
  double timeout_s = 0;
  std::string hostfile;
  std::string rsh = "ssh -o BatchMode=yes";
  std::string master_addr;
  int master_port = 0;
  std::string remote_merak;
  std::string remote_dir;
  std::vector<std::string> env;
  job::tls_files tls;
};

struct node_flags {
  int procs = 1;
  int first_rank = 0;
  int world_size = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;
  std::string token, token_file;
  std::string job_id;
  double timeout_s = 0;
  bool from_launcher = false;
  std::string chdir;
  job::tls_files tls;
};

constexpr const char* klaunch_about =
    "Run a merak command as the processes of one job: N on this host (--procs), or `merak node` "
    "on every host of a hostfile through ssh (--hostfile), e.g. merak launch --procs 2 train "
    "--data FILE --pp 2 (a pipeline stage per process)";
constexpr const char* knode_about =
    "Run this host's share of a job: K processes, ranks R..R+K-1 of W, meeting rank 0 at "
    "--master-addr:--master-port with a shared --token (one `merak node` per host, by hand or "
    "from merak launch --hostfile)";

// Variables a hostfile launch forwards to every node besides --env names:
// merak's, UCX's and NCCL's settings.
bool forwarded_by_default(const std::string& name) {
  for (const char* p : {"MERAK_", "UCX_", "NCCL_"})
    if (name.rfind(p, 0) == 0) return name != "MERAK_JOB_TOKEN" && name != "MERAK_JOB_ID";
  return false;
}

void add_flags(CLI::App& c, launch_flags& f) {
  auto* procs = c.add_option("--procs,--nproc-per-node,--nproc_per_node", f.procs,
                             "Processes (ranks) of the job on this host (torchrun's "
                             "--nproc-per-node)")
                    ->capture_default_str();
  auto* nnodes = c.add_option("--nnodes", f.nnodes,
                              "Hosts of the job, as torchrun: start one `merak launch` per host "
                              "with the same --nnodes, --rdzv-endpoint and token, and its own "
                              "--node-rank")
                     ->capture_default_str();
  c.add_option("--node-rank,--node_rank", f.node_rank,
               "With --nnodes: this host's index, 0..nnodes-1 (node 0 runs rank 0)")
      ->capture_default_str()
      ->needs(nnodes);
  c.add_option("--rdzv-endpoint,--rdzv_endpoint", f.rdzv_endpoint,
               "With --nnodes: HOST:PORT where node 0's rank 0 listens")
      ->needs(nnodes);
  c.add_option("--rdzv-id,--rdzv_id", f.rdzv_id,
               "With --nnodes: the job's id, the same on every host (default: MERAK_JOB_ID); "
               "rank 0 admits only ranks of this job")
      ->needs(nnodes);
  auto* token = c.add_option("--token", f.token,
                             "With --nnodes: the job token, the same on every host (default: "
                             "MERAK_JOB_TOKEN)")
                    ->needs(nnodes);
  c.add_option("--token-file", f.token_file,
               "With --nnodes: read the job token from this file (mode 0600)")
      ->excludes(token)
      ->needs(nnodes);
  auto* hostfile = c.add_option("--hostfile", f.hostfile,
                                "Hosts of the job, one per line: HOST [slots=K] (ranks in file "
                                "order)");
  procs->excludes(hostfile);  // a hostfile says how many ranks each host runs
  nnodes->excludes(hostfile);
  c.add_option("--rsh", f.rsh, "With --hostfile: the command that runs a command on a host")
      ->capture_default_str()
      ->needs(hostfile);
  c.add_option("--master-addr", f.master_addr,
               "With --hostfile: the address at which the other hosts reach rank 0 (default: "
               "the first host's name)")
      ->needs(hostfile);
  c.add_option("--master-port", f.master_port,
               "With --hostfile: rank 0's rendezvous port (default: a free one when the first "
               "host is this one, else 29500)")
      ->needs(hostfile);
  c.add_option("--remote-dir", f.remote_dir,
               "With --hostfile: the directory the command runs in on every host, where its "
               "relative paths resolve (default: this one's current directory)")
      ->needs(hostfile);
  c.add_option("--remote-merak", f.remote_merak,
               "With --hostfile: the merak program on the hosts (default: this one's path)")
      ->needs(hostfile);
  c.add_option("--env", f.env,
               "With --hostfile: a variable to forward to every host, besides MERAK_*, UCX_* "
               "and NCCL_* (repeatable)")
      ->allow_extra_args(false)  // one name a flag: the command that follows is not a name
      ->needs(hostfile);
  c.add_option("--timeout", f.timeout_s, "Seconds the whole job may take (0: no limit)")
      ->capture_default_str();
  c.add_option("--max-restarts", f.max_restarts,
               "Restart a failed job this many times, from the latest checkpoint of the "
               "command's --save directory (else from the start), as torchrun does")
      ->capture_default_str();
  add_tls_flags(c, f.tls);  // with --hostfile: the same paths on every host
  c.prefix_command();       // from the first non-flag on, everything is the command's
}

void add_flags(CLI::App& c, node_flags& f) {
  c.add_option("--procs", f.procs, "Processes of the job on this host")->capture_default_str();
  c.add_option("--first-rank", f.first_rank, "Rank of this host's first process")
      ->capture_default_str();
  c.add_option("--world-size", f.world_size, "Ranks in the whole job (default: --procs)");
  c.add_option("--master-addr", f.master_addr, "Where rank 0 listens (its host)")
      ->capture_default_str();
  c.add_option("--master-port", f.master_port,
               "Rank 0's rendezvous port (needed when the job spans hosts)");
  auto* token = c.add_option("--token", f.token,
                             "Job token, the same on every host (default: MERAK_JOB_TOKEN)");
  c.add_option("--token-file", f.token_file,
               "Read the job token from this file (mode 0600; a token on the command line shows "
               "in ps)")
      ->excludes(token);
  c.add_option("--job-id", f.job_id,
               "The job's id, the same on every host (default: MERAK_JOB_ID); rank 0 admits "
               "only ranks of this job");
  c.add_option("--timeout", f.timeout_s, "Seconds this node's ranks may take (0: no limit)")
      ->capture_default_str();
  c.add_option("--chdir", f.chdir,
               "Run the command in this directory (merak launch --hostfile passes its own)");
  c.add_flag("--from-launcher", f.from_launcher,
             "Read the token and variables from stdin (KEY=VALUE lines, then an empty line) and "
             "end the ranks when stdin closes (set by merak launch --hostfile)");
  add_tls_flags(c, f.tls);
  c.prefix_command();
}

// Parses `args` (after the sub-command's name) into flags and the command.
template <typename Flags>
std::vector<std::string> parse(std::vector<std::string> args, Flags& f, const char* about,
                               const char* name, int& exit_code) {
  CLI::App app{about, name};
  add_flags(app, f);
  std::reverse(args.begin(), args.end());  // CLI11 takes them last-first
  exit_code = -1;
  try {
    app.parse(args);
  } catch (const CLI::ParseError& e) {
    exit_code = app.exit(e);
    return {};
  }
  std::vector<std::string> rest = app.remaining();
  // The command starts with its name: a flag here is one this launcher does
  // not know (which the command would otherwise receive).
  if (!rest.empty() && rest.front().size() > 1 && rest.front()[0] == '-' && rest.front() != "--") {
    std::vector<std::string> known;
    for (auto* o : app.get_options())
      for (const auto& l : o->get_lnames()) known.push_back("--" + l);
    const std::string flag = rest.front().substr(0, rest.front().find('='));
    fail("{}: unknown flag '{}'{} (the command follows the launcher's flags; see {} --help)", name,
         flag, suggestion(flag, known), name);
  }
  if (!rest.empty() && rest.front() == "--") rest.erase(rest.begin());
  if (rest.empty()) fail("{}: no command given (e.g. {} ... train --data FILE --dp 2)", name, name);
  if (rest.front() == "launch" || rest.front() == "node")
    fail("{}: the command must not be launch or node itself", name);
  return rest;
}

// The command to restart a failed job with: resumed from the latest
// checkpoint in the directory of its `--save DIR` (or `--save=DIR`) when one
// is there (any --load of the command dropped), else the command unchanged.
// `from` tells where it resumes.
std::vector<std::string> restart_command(const std::vector<std::string>& command,
                                         std::string& from) {
  std::string save;
  for (size_t i = 0; i < command.size(); ++i) {
    if (command[i] == "--save" && i + 1 < command.size()) save = command[i + 1];
    if (command[i].rfind("--save=", 0) == 0) save = command[i].substr(7);
  }
  std::error_code ec;
  if (save.empty() ||
      !std::filesystem::is_regular_file(std::filesystem::path(save) / "latest", ec)) {
    from = "the start";
    return command;
  }
  std::vector<std::string> out;
  for (size_t i = 0; i < command.size(); ++i) {
    if (command[i] == "--load") {
      ++i;
      continue;
    }
    if (command[i].rfind("--load=", 0) == 0) continue;
    out.push_back(command[i]);
  }
  out.push_back("--load");
  out.push_back(save);
  from = "the latest checkpoint in " + save;
  return out;
}

// Runs the job through `run` (the command's argv tail), restarting it up to
// max_restarts times after a failure; fails naming the last failure.
template <typename Run>
int run_with_restarts(const launch_flags& f, const std::vector<std::string>& command, Run&& run) {
  if (f.max_restarts < 0)
    fail("merak launch: --max-restarts must not be negative (got {})", f.max_restarts);
  std::vector<std::string> cmd = command;
  for (int attempt = 0;; ++attempt) {
    std::string failure = run(cmd);
    if (failure.empty()) return 0;
    if (attempt >= f.max_restarts) fail("merak launch: {}", failure);
    std::string from;
    cmd = restart_command(command, from);
    std::fprintf(stderr, "merak launch: %s; restarting the job (%d of %d) from %s\n",
                 failure.c_str(), attempt + 1, f.max_restarts, from.c_str());
  }
}

// 0: no limit; else at least a millisecond (a smaller limit would read as
// none) and at most a year.
std::chrono::milliseconds seconds_flag(const char* who, double s) {
  if (!(s == 0 || (s >= 0.001 && s <= 365.0 * 86400)))
    fail("{}: --timeout must be 0 (no limit) or from 0.001 to 31536000 seconds (got {})", who, s);
  return std::chrono::milliseconds(int64_t(s * 1000));
}

// Reads KEY=VALUE lines from stdin up to an empty line (byte by byte: what
// follows stays unread, and the stream is then watched for its end).
std::map<std::string, std::string> read_launcher_env() {
  std::map<std::string, std::string> env;
  std::string line;
  for (;;) {
    char c;
    ssize_t n = ::read(STDIN_FILENO, &c, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail("merak node: the launcher's input ended before its empty line");
    if (c != '\n') {
      line += c;
      continue;
    }
    if (line.empty()) break;
    auto eq = line.find('=');
    if (eq == std::string::npos || eq == 0)
      fail("merak node: the launcher sent '{}', not KEY=VALUE", line);
    env[line.substr(0, eq)] = line.substr(eq + 1);
    line.clear();
  }
  return env;
}

bool loopback_name(const std::string& h) {
  return h == "localhost" || h.rfind("127.", 0) == 0;
}

bool names_this_host(const std::string& h) {
  if (loopback_name(h)) return true;
  char name[256] = {};
  return ::gethostname(name, sizeof name - 1) == 0 && h == name;
}

// One attempt at a hostfile job; "" when it succeeded, else what failed.
std::string launch_hosts(const launch_flags& f, const std::vector<std::string>& command) {
  const auto hosts = job::read_hostfile(f.hostfile);
  int world = 0;
  for (auto& h : hosts) world += h.slots;
  // ssh takes USER@HOST; the other hosts reach rank 0 at HOST.
  auto address = [](const job::host_entry& h) { return h.name.substr(h.name.find('@') + 1); };
  const std::string addr = f.master_addr.empty() ? address(hosts.front()) : f.master_addr;
  const bool loopback = loopback_name(addr);
  for (auto& h : hosts)
    if (loopback && !names_this_host(address(h)))
      fail(
          "{}:{}: host {} cannot reach rank 0 at {}: name the first host by an address the "
          "others reach, or give --master-addr",
          f.hostfile, h.line, h.name, addr);
  int port = f.master_port;
  if (port <= 0) port = names_this_host(addr) ? job::pick_free_port("127.0.0.1") : 29500;
  std::vector<std::string> rsh;
  {
    std::istringstream words(f.rsh);
    for (std::string w; words >> w;) rsh.push_back(w);
  }
  if (rsh.empty()) fail("merak launch: --rsh is empty");

  const auto env = job::launcher_environment();
  std::string feed = "MERAK_JOB_TOKEN=" + job::random_token() + "\n";
  feed += "MERAK_JOB_ID=" + job::random_token().substr(0, 16) + "\n";
  for (auto& [k, v] : env) {
    const bool asked = std::find(f.env.begin(), f.env.end(), k) != f.env.end();
    if ((asked || forwarded_by_default(k)) && v.find('\n') == std::string::npos)
      feed += k + "=" + v + "\n";
  }
  for (auto& k : f.env)
    if (!env.count(k)) fail("merak launch: --env {}: no such variable here", k);
  feed += "\n";

  const std::string merak = f.remote_merak.empty() ? merak_program() : f.remote_merak;
  // ssh starts the node in the home directory: the command's relative paths
  // (--data, --metrics) must mean what they mean here.
  std::string dir = f.remote_dir;
  if (dir.empty()) {
    std::error_code ec;
    dir = std::filesystem::current_path(ec).string();
    if (ec) fail("merak launch: cannot read the current directory: {}", ec.message());
  }
  std::vector<job::child_spec> nodes;
  int first = 0;
  for (auto& h : hosts) {
    std::vector<std::string> remote = {merak,
                                       "node",
                                       "--procs",
                                       std::to_string(h.slots),
                                       "--first-rank",
                                       std::to_string(first),
                                       "--world-size",
                                       std::to_string(world),
                                       "--master-addr",
                                       addr,
                                       "--master-port",
                                       std::to_string(port),
                                       "--chdir",
                                       dir,
                                       "--from-launcher",
                                       "--"};
    remote.insert(remote.end(), command.begin(), command.end());
    std::string line;
    for (auto& a : remote) line += (line.empty() ? "" : " ") + job::shell_quote(a);
    job::child_spec c;
    c.name = h.slots == 1
                 ? fmt::format("host {} (rank {})", h.name, first)
                 : fmt::format("host {} (ranks {}-{})", h.name, first, first + h.slots - 1);
    c.argv = rsh;
    c.argv.push_back(h.name);
    c.argv.push_back(line);
    c.env = env;
    c.stdin_text = feed;
    nodes.push_back(std::move(c));
    first += h.slots;
  }
  job::supervise_options so;
  so.timeout = seconds_flag("merak launch", f.timeout_s);
  so.grace = std::chrono::milliseconds(10000);  // a node reports its own failed rank first
  auto r = job::supervise(nodes, so);
  if (r.interrupted) job::end_by_signal(r.interrupted);
  if (!r.ok()) return r.message;
  return std::string();
}

}  // namespace

// Registered for `merak --help` only: main() hands `merak launch|node ...`
// to run_launch / run_node before the sub-commands are parsed, since the
// launched command's own flags must not be parsed here.
action add_launch_command(CLI::App& parent) {
  static launch_flags unused;
  add_flags(*parent.add_subcommand("launch", klaunch_about), unused);
  return [] { return 0; };
}

action add_node_command(CLI::App& parent) {
  static node_flags unused;
  add_flags(*parent.add_subcommand("node", knode_about), unused);
  return [] { return 0; };
}

namespace {
int run_node_share(const node_flags& f, const std::vector<std::string>& command);

// `merak launch --nnodes M --node-rank R --rdzv-endpoint HOST:PORT`: this
// host's share, as `merak node` with ranks R*N..R*N+N-1 of M*N.
int launch_torchrun_node(const launch_flags& f, const std::vector<std::string>& command) {
  if (f.nnodes < 1) fail("merak launch: --nnodes must be at least 1 (got {})", f.nnodes);
  if (f.node_rank < 0 || f.node_rank >= f.nnodes)
    fail("merak launch: --node-rank {} is not in 0..{} (--nnodes {})", f.node_rank, f.nnodes - 1,
         f.nnodes);
  if (f.procs < 1) fail("merak launch: --nproc-per-node must be at least 1 (got {})", f.procs);
  if (f.rdzv_endpoint.empty())
    fail(
        "merak launch: --nnodes {} needs --rdzv-endpoint HOST:PORT (where node 0's rank 0 "
        "listens)",
        f.nnodes);
  if (f.max_restarts > 0)
    fail(
        "merak launch: --max-restarts needs one launcher for the whole job (--procs or "
        "--hostfile), not one per host (--nnodes)");
  const size_t colon = f.rdzv_endpoint.rfind(':');
  node_flags n;
  if (colon == std::string::npos || colon == 0)
    fail("merak launch: --rdzv-endpoint '{}' is not HOST:PORT", f.rdzv_endpoint);
  n.master_addr = f.rdzv_endpoint.substr(0, colon);
  try {
    size_t used = 0;
    n.master_port = std::stoi(f.rdzv_endpoint.substr(colon + 1), &used);
    if (used != f.rdzv_endpoint.size() - colon - 1 || n.master_port < 1 || n.master_port > 65535)
      throw std::invalid_argument("port");
  } catch (const std::exception&) {
    fail("merak launch: --rdzv-endpoint '{}': the port is not in 1..65535", f.rdzv_endpoint);
  }
  n.procs = f.procs;
  n.first_rank = f.node_rank * f.procs;
  n.world_size = f.nnodes * f.procs;
  n.token = f.token;
  n.token_file = f.token_file;
  n.job_id = f.rdzv_id;
  n.timeout_s = f.timeout_s;
  n.tls = f.tls;
  return run_node_share(n, command);
}
}  // namespace

int run_launch(std::vector<std::string> args) {
  launch_flags f;
  int code = -1;
  auto command = parse(std::move(args), f, klaunch_about, "merak launch", code);
  if (code >= 0) return code;
  if (f.nnodes != 1 || !f.rdzv_endpoint.empty()) return launch_torchrun_node(f, command);
  use_tls_flags(f.tls, "merak launch");
  if (!f.hostfile.empty())
    return run_with_restarts(
        f, command, [&](const std::vector<std::string>& cmd) { return launch_hosts(f, cmd); });
  if (f.procs < 1) fail("merak launch: --procs must be at least 1 (got {})", f.procs);
  return run_with_restarts(f, command, [&](const std::vector<std::string>& cmd) {
    job::launch_options lo;
    lo.procs = f.procs;
    lo.argv.push_back(merak_program());
    lo.argv.insert(lo.argv.end(), cmd.begin(), cmd.end());
    lo.timeout = seconds_flag("merak launch", f.timeout_s);
    auto r = job::launch_local(lo);
    return r.ok() ? std::string() : r.message;
  });
}

int run_node(std::vector<std::string> args) {
  node_flags f;
  int code = -1;
  auto command = parse(std::move(args), f, knode_about, "merak node", code);
  if (code >= 0) return code;
  return run_node_share(f, command);
}

namespace {

// This host's ranks of a job, as `merak node` runs them (also for `merak
// launch --nnodes M --node-rank R`, torchrun's multi-node form).
int run_node_share(const node_flags& f, const std::vector<std::string>& command) {
  job::launch_options lo;
  if (f.from_launcher) {
    lo.env = read_launcher_env();
    lo.watch_fd = STDIN_FILENO;
    // The launcher's TLS files, checked here: the same paths on this host.
    // The ranks inherit them from this process (with this node's flags
    // taking precedence).
    for (const char* k : {"MERAK_TLS_CERT", "MERAK_TLS_KEY", "MERAK_TLS_CA"})
      if (auto it = lo.env.find(k); it != lo.env.end()) {
        if (f.tls.cert.empty()) ::setenv(k, it->second.c_str(), 1);
        lo.env.erase(it);
      }
  }
  {
    char host[256] = {};
    ::gethostname(host, sizeof host - 1);
    use_tls_flags(f.tls, fmt::format("merak node on {}", host));
  }
  if (f.procs < 1) fail("merak node: --procs must be at least 1 (got {})", f.procs);
  if (!f.chdir.empty() && ::chdir(f.chdir.c_str()) != 0) {
    char host[256] = {};
    ::gethostname(host, sizeof host - 1);
    fail(
        "merak node on {}: cannot enter {}: {} (a directory the launcher's host has; give merak "
        "launch --remote-dir)",
        host, f.chdir, std::strerror(errno));
  }
  lo.procs = f.procs;
  lo.first_rank = f.first_rank;
  lo.world_size = f.world_size > 0 ? f.world_size : f.procs;
  if (f.first_rank < 0 || f.first_rank + f.procs > lo.world_size)
    fail("merak node: ranks {}..{} (--first-rank {}, --procs {}) do not fit --world-size {}",
         f.first_rank, f.first_rank + f.procs - 1, f.first_rank, f.procs, lo.world_size);
  lo.master_addr = f.master_addr;
  lo.master_port = f.master_port;
  if (lo.world_size > f.procs && f.master_port <= 0)
    fail("merak node: a job of {} ranks with {} on this host needs --master-port (rank 0's port)",
         lo.world_size, f.procs);
  if (lo.env.count("MERAK_JOB_TOKEN")) {
    lo.token = lo.env["MERAK_JOB_TOKEN"];
  } else if (!f.token_file.empty()) {
    lo.token = job::read_token_file(f.token_file);
  } else if (!f.token.empty()) {
    lo.token = f.token;
  } else if (const char* t = std::getenv("MERAK_JOB_TOKEN"); t && *t) {
    lo.token = t;
  } else if (lo.world_size > f.procs) {
    fail(
        "merak node: a job spread over hosts needs the same --token (or MERAK_JOB_TOKEN) on "
        "every host");
  }
  if (!lo.env.count("MERAK_JOB_ID")) lo.job_id = f.job_id;
  lo.argv.push_back(merak_program());
  lo.argv.insert(lo.argv.end(), command.begin(), command.end());
  lo.timeout = seconds_flag("merak node", f.timeout_s);
  auto r = job::launch_local(lo);
  if (!r.ok()) fail("merak node: {}", r.message);
  return 0;
}

}  // namespace

}  // namespace merak::apps
