#include "comm/launcher.hpp"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <thread>

#include "comm/bootstrap.hpp"
#include "core/error.hpp"

extern char** environ;

namespace merak::comm {

std::string self_executable() {
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) fail("launcher: cannot read /proc/self/exe: {}", std::strerror(errno));
  return {buf, static_cast<size_t>(n)};
}

std::string random_token() {
  std::ifstream in("/dev/urandom", std::ios::binary);
  unsigned char b[16];
  if (!in.read(reinterpret_cast<char*>(b), sizeof b)) fail("launcher: cannot read /dev/urandom");
  std::string s;
  for (unsigned char c : b) s += fmt::format("{:02x}", c);
  return s;
}

launch_result launch_local(const launch_options& o) {
  if (o.procs < 1) fail("launcher: --procs {} must be at least 1", o.procs);
  if (o.argv.empty()) fail("launcher: no program to run");
  using clock_type = std::chrono::steady_clock;

  std::map<std::string, std::string> common;
  for (char** e = environ; *e; ++e) {
    std::string kv = *e;
    auto eq = kv.find('=');
    if (eq != std::string::npos) common[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  // A launcher's own rank variables must not leak into its workers.
  for (const char* v :
       {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS"})
    common.erase(v);
  for (auto& [k, v] : o.env) common[k] = v;
  common["WORLD_SIZE"] = std::to_string(o.procs);
  common["MASTER_ADDR"] = "127.0.0.1";
  common["MASTER_PORT"] = std::to_string(pick_free_port("127.0.0.1"));
  common["MERAK_JOB_TOKEN"] = random_token();

  // Everything a child needs is built before fork: after it, only
  // async-signal-safe calls.
  std::vector<char*> argv;
  for (auto& a : o.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::vector<std::vector<std::string>> envs(o.procs);
  std::vector<std::vector<char*>> envps(o.procs);
  for (int r = 0; r < o.procs; ++r) {
    auto env = common;
    env["RANK"] = std::to_string(r);
    if (o.rank_env) o.rank_env(r, env);
    for (auto& [k, v] : env) envs[r].push_back(k + "=" + v);
    for (auto& s : envs[r]) envps[r].push_back(s.data());
    envps[r].push_back(nullptr);
  }

  const pid_t parent = ::getpid();
  std::vector<pid_t> pids(o.procs, -1);
  launch_result res;
  res.exit_code.assign(o.procs, 0);
  res.signal.assign(o.procs, 0);
  std::vector<bool> running(o.procs, false);
  auto kill_running = [&] {
    for (int r = 0; r < o.procs; ++r)
      if (running[r]) ::kill(pids[r], SIGKILL);
  };
  for (int r = 0; r < o.procs; ++r) {
    pid_t pid = ::fork();
    if (pid < 0) {
      kill_running();
      fail("launcher: fork for rank {}: {}", r, std::strerror(errno));
    }
    if (pid == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(127);
      ::execve(argv[0], argv.data(), envps[r].data());
      ::_exit(127);
    }
    pids[r] = pid;
    running[r] = true;
  }

  const auto start = clock_type::now();
  clock_type::time_point kill_at = clock_type::time_point::max();
  if (o.timeout.count() > 0) kill_at = start + o.timeout;
  int left = o.procs;
  bool timed_out = false;
  while (left > 0) {
    bool reaped = false;
    for (int r = 0; r < o.procs; ++r) {
      if (!running[r]) continue;
      int st = 0;
      pid_t p = ::waitpid(pids[r], &st, WNOHANG);
      if (p == 0) continue;
      running[r] = false;
      --left;
      reaped = true;
      if (p < 0) {
        res.exit_code[r] = -1;
      } else if (WIFEXITED(st)) {
        res.exit_code[r] = WEXITSTATUS(st);
      } else if (WIFSIGNALED(st)) {
        res.exit_code[r] = -1;
        res.signal[r] = WTERMSIG(st);
      }
      const bool failed = res.exit_code[r] != 0;
      if (failed && res.first_failed < 0) {
        res.first_failed = r;
        res.message = res.signal[r]
                          ? fmt::format("rank {} was killed by signal {} ({})", r, res.signal[r],
                                        strsignal(res.signal[r]))
                          : fmt::format("rank {} failed with exit code {}", r, res.exit_code[r]);
        kill_at = std::min(kill_at, clock_type::now() + o.grace);
      }
    }
    if (left == 0) break;
    if (clock_type::now() >= kill_at) {
      if (res.first_failed < 0) timed_out = true;
      kill_running();
      kill_at = clock_type::time_point::max();
    }
    if (!reaped) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (timed_out && res.first_failed < 0) {
    for (int r = 0; r < o.procs; ++r)
      if (res.signal[r] == SIGKILL) {
        res.first_failed = r;
        break;
      }
    res.message = fmt::format("the job did not finish within {} ms; its ranks were killed",
                              o.timeout.count());
  }
  return res;
}

}  // namespace merak::comm
