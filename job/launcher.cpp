#include "job/launcher.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <optional>
#include <sstream>
#include <utility>

#include "core/error.hpp"
#include "core/shared_memory.hpp"
#include "job/auth.hpp"
#include "job/openmp_spin.hpp"
#include "job/socket_io.hpp"

extern char** environ;

namespace merak::job {

std::string self_executable() {
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) fail("launcher: cannot read /proc/self/exe: {}", std::strerror(errno));
  return {buf, static_cast<size_t>(n)};
}

std::vector<host_entry> read_hostfile(const std::string& path) {
  std::ifstream in(path);
  if (!in) fail("{}: cannot open the hostfile: {}", path, std::strerror(errno));
  std::vector<host_entry> hosts;
  std::map<std::string, int> seen;
  std::string text;
  for (int line = 1; std::getline(in, text); ++line) {
    if (auto hash = text.find('#'); hash != std::string::npos) text.resize(hash);
    std::istringstream words(text);
    host_entry h;
    h.line = line;
    if (!(words >> h.name)) continue;
    for (std::string w; words >> w;) {
      const auto eq = w.find('=');
      const std::string key = w.substr(0, eq);
      if (eq == std::string::npos || (key != "slots" && key != "max_slots"))
        fail("{}:{}: unknown field '{}' (a line is: HOST [slots=K])", path, line, w);
      if (key == "max_slots") continue;  // Open MPI's cap; merak starts `slots`
      const std::string v = w.substr(eq + 1);
      size_t used = 0;
      long k = 0;
      try {
        k = std::stol(v, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used != v.size() || v.empty() || k < 1 || k > 4096)
        fail("{}:{}: slots must be a whole number from 1 to 4096 (got '{}')", path, line, v);
      h.slots = static_cast<int>(k);
    }
    if (auto [it, fresh] = seen.emplace(h.name, line); !fresh)
      fail("{}:{}: host {} is listed twice (first on line {}); give it slots=K instead", path, line,
           h.name, it->second);
    hosts.push_back(h);
  }
  if (hosts.empty()) fail("{}: the hostfile names no host", path);
  return hosts;
}

std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

std::map<std::string, std::string> launcher_environment() {
  std::map<std::string, std::string> env;
  for (char** e = environ; *e; ++e) {
    std::string kv = *e;
    auto eq = kv.find('=');
    if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  for (const char* v : {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                        "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_PROCID", "SLURM_NTASKS",
                        "SLURM_LOCALID", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"})
    env.erase(v);
  return env;
}

launch_result launch_local(const launch_options& options) {
  if (options.procs < 1) fail("launcher: --procs {} must be at least 1", options.procs);
  if (options.argv.empty()) fail("launcher: no program to run");
  const int world = options.world_size > 0 ? options.world_size : options.procs;
  if (options.first_rank < 0 || options.first_rank + options.procs > world)
    fail("launcher: ranks {}..{} do not fit a job of {} ranks", options.first_rank,
         options.first_rank + options.procs - 1, world);
  if (world > options.procs && options.master_port <= 0)
    fail("launcher: a job of {} ranks with {} here needs the rendezvous port of rank 0", world,
         options.procs);
  auto common = launcher_environment();
  for (auto& [k, v] : options.env) common[k] = v;
  const std::string addr = options.master_addr.empty() ? "127.0.0.1" : options.master_addr;
  common["WORLD_SIZE"] = std::to_string(world);
  common["MASTER_ADDR"] = addr;
  common["MASTER_PORT"] =
      std::to_string(options.master_port > 0 ? options.master_port : pick_free_port(addr));
  common["MERAK_JOB_TOKEN"] = options.token.empty() ? random_token() : options.token;
  if (!options.job_id.empty())
    common["MERAK_JOB_ID"] = options.job_id;
  else if (world == options.procs && !common.count("MERAK_JOB_ID"))
    common["MERAK_JOB_ID"] = random_token().substr(0, 16);
  common["LOCAL_WORLD_SIZE"] = std::to_string(options.procs);
  const auto get = [&common](const char* name) -> const char* {
    auto it = common.find(name);
    return it == common.end() ? nullptr : it->second.c_str();
  };
  if (wants_short_openmp_spin(get, processes_on_host(get)))
    common[kopenmp_spin_variable] = kshared_host_openmp_spin;

  std::vector<child_spec> children(options.procs);
  for (int r = 0; r < options.procs; ++r) {
    const int rank = options.first_rank + r;
    auto& c = children[r];
    c.name = fmt::format("rank {}", rank);
    c.argv = options.argv;
    c.env = common;
    c.env["RANK"] = std::to_string(rank);
    c.env["LOCAL_RANK"] = std::to_string(r);
    if (options.rank_env) options.rank_env(rank, c.env);
  }
  // Before the ranks start, the leftovers of ended ones; after they ended,
  // theirs (a rank killed before it unlinked its rings).
  sweep_shared_memory();
  std::optional<shared_directory> ucx_dir;
  if (!common.count("UCX_POSIX_DIR")) {
    ucx_dir.emplace();
    if (!ucx_dir->path().empty())
      for (auto& c : children) c.env.emplace("UCX_POSIX_DIR", ucx_dir->path());
  }
  auto res = supervise(children, {options.grace, options.timeout, options.watch_fd});
  ucx_dir.reset();
  sweep_shared_memory();
  if (res.interrupted) end_by_signal(res.interrupted);
  return res;
}

void end_by_signal(int sig) {
  std::fflush(nullptr);
  ::signal(sig, SIG_DFL);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, sig);
  ::sigprocmask(SIG_UNBLOCK, &set, nullptr);
  ::raise(sig);
  ::_exit(128 + sig);
}

namespace {

// True once `fd` reads end of file (or fails); data read is dropped.
bool input_closed(int fd) {
  pollfd p{fd, POLLIN, 0};
  if (::poll(&p, 1, 0) <= 0) return false;
  char buf[256];
  ssize_t n = ::read(fd, buf, sizeof buf);
  return n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR);
}

// A descriptor that polls readable once process `pid` has ended, or -1
// where the kernel has none (before Linux 5.3).
int process_fd(pid_t pid) {
#ifdef SYS_pidfd_open
  return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
#else
  return -1;
#endif
}

// Sleeps until a child in `fds` (-1: none to poll) may have ended, `watch`
// may have changed, or `max` ran out. Without a descriptor for every child
// it sleeps briefly instead, so that a child's end is still seen soon. The
// supervisor thus wakes only for events: it shares the cores with the
// children it supervises.
void await_children(const std::vector<int>& fds, int watch, std::chrono::milliseconds max) {
  std::vector<pollfd> p;
  bool blind = false;
  for (int fd : fds) {
    if (fd >= 0)
      p.push_back({fd, POLLIN, 0});
    else
      blind = true;
  }
  if (watch >= 0) p.push_back({watch, POLLIN, 0});
  const int64_t ms = blind ? std::min<int64_t>(5, max.count()) : max.count();
  ::poll(p.data(), p.size(), static_cast<int>(std::max<int64_t>(0, ms)));
}

// The children of one supervise call: their processes, our end of each
// one's stdin (open until the end) and its pidfd (readable once it ended).
// Everything a child needs is built before fork: after it, only
// async-signal-safe calls (and execvpe's PATH search). The destructor
// closes every descriptor; killing is explicit.
class child_group {
 public:
  explicit child_group(const std::vector<child_spec>& children)
      : children_(children),
        argvs_(children.size()),
        envps_(children.size()),
        envs_(children.size()),
        pids_(children.size(), -1),
        feeds_(children.size(), -1),
        pidfds_(children.size(), -1),
        running_(children.size(), false) {
    for (size_t i = 0; i < children.size(); ++i) {
      if (children[i].argv.empty()) fail("launcher: {} has no program to run", children[i].name);
      for (auto& a : children[i].argv) argvs_[i].push_back(const_cast<char*>(a.c_str()));
      argvs_[i].push_back(nullptr);
      for (auto& [k, v] : children[i].env) envs_[i].push_back(k + "=" + v);
      for (auto& s : envs_[i]) envps_[i].push_back(s.data());
      envps_[i].push_back(nullptr);
    }
  }
  child_group(const child_group&) = delete;
  child_group& operator=(const child_group&) = delete;
  ~child_group() { close_all(); }

  int size() const { return static_cast<int>(children_.size()); }
  pid_t pid(int i) const { return pids_[size_t(i)]; }
  bool running(int i) const { return running_[size_t(i)]; }

  // Forks and executes every child, each fed its stdin_text. On a failure
  // kills the children already started and throws merak::error.
  void start() {
    const pid_t parent = ::getpid();
    for (size_t i = 0; i < children_.size(); ++i) {
      // A socket pair, not a pipe: send() with MSG_NOSIGNAL cannot raise
      // SIGPIPE in this process when the child is already gone.
      int sv[2] = {-1, -1};
      const bool feed = !children_[i].stdin_text.empty();
      if (feed && ::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
        kill_running();
        fail("launcher: socketpair for {}: {}", children_[i].name, std::strerror(errno));
      }
      pid_t pid = ::fork();
      if (pid < 0) {
        kill_running();
        fail("launcher: fork for {}: {}", children_[i].name, std::strerror(errno));
      }
      if (pid == 0) {
        ::prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (::getppid() != parent) ::_exit(127);
        if (feed && ::dup2(sv[1], STDIN_FILENO) < 0) ::_exit(127);
        ::execvpe(argvs_[i][0], argvs_[i].data(), envps_[i].data());
        ::_exit(127);
      }
      pids_[i] = pid;
      pidfds_[i] = process_fd(pid);
      running_[i] = true;
      if (feed) {
        ::close(sv[1]);
        feeds_[i] = sv[0];
        const std::string& text = children_[i].stdin_text;
        // A few hundred bytes: the socket's buffer takes them whole.
        (void)::send(sv[0], text.data(), text.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      }
    }
  }

  void kill_running() { signal_running(SIGKILL); }

  void signal_running(int sig) {
    for (size_t i = 0; i < children_.size(); ++i)
      if (running_[i]) ::kill(pids_[i], sig);
  }

  void close_all() {
    for (int& f : feeds_)
      if (f >= 0) ::close(std::exchange(f, -1));
    for (int& f : pidfds_)
      if (f >= 0) ::close(std::exchange(f, -1));
  }

  // Reaps child `i` if it ended, recording its exit code or signal in
  // `res`; returns whether it did.
  bool reap(int i, launch_result& res) {
    int status = 0;
    const pid_t p = ::waitpid(pids_[size_t(i)], &status, WNOHANG);
    if (p == 0) return false;
    running_[size_t(i)] = false;
    if (pidfds_[size_t(i)] >= 0) ::close(std::exchange(pidfds_[size_t(i)], -1));
    if (p < 0) {
      res.exit_code[size_t(i)] = -1;
    } else if (WIFEXITED(status)) {
      res.exit_code[size_t(i)] = WEXITSTATUS(status);
    } else if (WIFSIGNALED(status)) {
      res.exit_code[size_t(i)] = -1;
      res.signal[size_t(i)] = WTERMSIG(status);
    }
    return true;
  }

  // The pidfds of the children still running (-1 where a child has none).
  std::vector<int> running_fds() const {
    std::vector<int> fds;
    for (size_t i = 0; i < children_.size(); ++i)
      if (running_[i]) fds.push_back(pidfds_[i]);
    return fds;
  }

 private:
  const std::vector<child_spec>& children_;
  std::vector<std::vector<char*>> argvs_, envps_;
  std::vector<std::vector<std::string>> envs_;
  std::vector<pid_t> pids_;
  std::vector<int> feeds_;
  std::vector<int> pidfds_;
  std::vector<bool> running_;
};

// The signal that asked the supervisor to stop; 0: none yet.
volatile sig_atomic_t pending_signal = 0;

extern "C" void note_signal(int sig) {
  pending_signal = sig;
}

// While it lives: SIGINT, SIGTERM and SIGHUP are noted in pending_signal
// (a poll they interrupt returns at once) instead of ending the process.
class signal_catcher {
 public:
  signal_catcher() {
    pending_signal = 0;
    struct sigaction sa {};
    sa.sa_handler = note_signal;
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < std::size(kcaught); ++i) ::sigaction(kcaught[i], &sa, &old_[i]);
  }
  signal_catcher(const signal_catcher&) = delete;
  signal_catcher& operator=(const signal_catcher&) = delete;
  ~signal_catcher() {
    for (size_t i = 0; i < std::size(kcaught); ++i) ::sigaction(kcaught[i], &old_[i], nullptr);
  }

 private:
  static constexpr int kcaught[3] = {SIGINT, SIGTERM, SIGHUP};
  struct sigaction old_[3]{};
};

// The lines that failing children hand over: each child finds the write
// end of one pipe in MERAK_FAILURE_FD and writes "PID LINE\n" there, in one
// write, before it exits (apps/cli_main.cpp). A child's stderr stays its
// own; the launcher quotes the line of the child that failed first, which
// names what failed, e.g. the peer it found unresponsive.
class failure_notes {
 public:
  failure_notes() {
    if (::pipe2(fds_, O_CLOEXEC | O_NONBLOCK) != 0) fds_[0] = fds_[1] = -1;
    if (fds_[1] >= 0) ::fcntl(fds_[1], F_SETFD, 0);  // the children inherit it
  }
  failure_notes(const failure_notes&) = delete;
  failure_notes& operator=(const failure_notes&) = delete;
  ~failure_notes() {
    for (int fd : fds_)
      if (fd >= 0) ::close(fd);
  }
  // The children's environments with the write end named.
  std::vector<child_spec> told(std::vector<child_spec> children) const {
    if (fds_[1] >= 0)
      for (auto& c : children) c.env["MERAK_FAILURE_FD"] = std::to_string(fds_[1]);
    return children;
  }
  // Once every child started: only they hold the write end.
  void started() {
    if (fds_[1] >= 0) ::close(std::exchange(fds_[1], -1));
  }
  // The last line child `pid` handed over; empty when none.
  std::string of(pid_t pid) {
    char buf[4096];
    for (ssize_t n; fds_[0] >= 0 && (n = ::read(fds_[0], buf, sizeof buf)) > 0;)
      text_.append(buf, size_t(n));
    const std::string prefix = std::to_string(pid) + " ";
    std::string line;
    std::istringstream lines(text_);
    for (std::string l; std::getline(lines, l);)
      if (l.rfind(prefix, 0) == 0) line = l.substr(prefix.size());
    return line.substr(0, 2000);
  }

 private:
  int fds_[2] = {-1, -1};
  std::string text_;  // kept small: one line per failing child
};

// Whether process `pid` is stopped (SIGSTOP, a debugger): state T or t in
// /proc/PID/stat.
bool is_stopped(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  std::getline(in, stat);
  const size_t paren = stat.rfind(')');  // the name, in parentheses, may hold spaces
  return paren != std::string::npos && paren + 2 < stat.size() &&
         (stat[paren + 2] == 'T' || stat[paren + 2] == 't');
}

// The first failure's message made to say what its child said, and which
// other children were stopped then (a stopped rank is silent: the rank that
// fails first is the one that noticed, not the one at fault).
void explain_failure(const std::vector<child_spec>& children, child_group& group, int failed,
                     failure_notes& notes, launch_result& res) {
  std::string stopped;
  for (int j = 0; j < group.size(); ++j)
    if (j != failed && group.running(j) && is_stopped(group.pid(j)))
      stopped += (stopped.empty() ? "" : ", ") + children[size_t(j)].name;
  const std::string note = notes.of(group.pid(failed));
  if (!note.empty()) res.message += ": " + note;
  if (!stopped.empty())
    res.message = fmt::format("{} {} stopped (SIGSTOP or a debugger) when {}", stopped,
                              stopped.find(',') == std::string::npos ? "was" : "were",
                              res.message);
}

// What one supervise call has seen so far: the deadline for killing the
// children (the timeout, or the grace after the first failure) and why
// children were killed.
struct supervision {
  using clock_type = std::chrono::steady_clock;
  clock_type::time_point kill_at = clock_type::time_point::max();
  bool timed_out = false;
  bool orphaned = false;
  int interrupted = 0;    // the signal passed on to the children
  int first_killed = -1;  // by us, at the timeout, when orphaned or interrupted

  // Child `i` of `children` ended as `res` records: the first failure not
  // caused by our own kill names the job's failure and starts the grace.
  void ended(int i, const std::vector<child_spec>& children, launch_result& res,
             std::chrono::milliseconds grace) {
    const bool failed = res.exit_code[size_t(i)] != 0;
    if (failed && (timed_out || orphaned || interrupted)) {
      if (first_killed < 0) first_killed = i;
    } else if (failed && res.first_failed < 0) {
      res.first_failed = i;
      const auto& name = children[size_t(i)].name;
      const int signal = res.signal[size_t(i)];
      res.message =
          signal ? fmt::format("{} was killed by signal {} ({})", name, signal, strsignal(signal))
                 : fmt::format("{} failed with exit code {}", name, res.exit_code[size_t(i)]);
      kill_at = std::min(kill_at, clock_type::now() + grace);
    }
  }

  // After the last child ended: a job killed by us fails naming why.
  void finish(launch_result& res, std::chrono::milliseconds timeout) const {
    res.interrupted = interrupted;
    if (res.first_failed >= 0 || !(orphaned || timed_out || interrupted)) return;
    res.first_failed = std::max(first_killed, 0);
    res.message = interrupted
                      ? fmt::format("the launcher got signal {} ({}); the ranks were stopped",
                                    interrupted, strsignal(interrupted))
                  : orphaned ? "the launcher that started this node went away (its input closed); "
                               "the ranks were killed"
                             : fmt::format(
                                   "the job did not finish within {} ms; its processes "
                                   "were killed",
                                   timeout.count());
  }
};

}  // namespace

launch_result supervise(const std::vector<child_spec>& children, const supervise_options& options) {
  using clock_type = supervision::clock_type;
  const int n = static_cast<int>(children.size());
  if (n == 0) fail("launcher: no process to start");
  failure_notes notes;
  const std::vector<child_spec> told = notes.told(children);
  child_group group(told);
  signal_catcher catcher;
  group.start();
  notes.started();

  launch_result res;
  res.exit_code.assign(n, 0);
  res.signal.assign(n, 0);
  supervision seen;
  if (options.timeout.count() > 0) seen.kill_at = clock_type::now() + options.timeout;
  int left = n;
  while (left > 0) {
    bool reaped = false;
    for (int i = 0; i < n; ++i) {
      if (!group.running(i) || !group.reap(i, res)) continue;
      --left;
      reaped = true;
      const bool first = res.first_failed < 0;
      seen.ended(i, children, res, options.grace);
      if (first && res.first_failed == i) explain_failure(children, group, i, notes, res);
    }
    if (left == 0) break;
    if (options.watch_fd >= 0 && !seen.orphaned && input_closed(options.watch_fd)) {
      seen.orphaned = true;
      group.kill_running();
    }
    if (pending_signal && !seen.interrupted) {
      seen.interrupted = pending_signal;
      group.signal_running(seen.interrupted);
      seen.kill_at = std::min(seen.kill_at, clock_type::now() + options.grace);
    }
    if (clock_type::now() >= seen.kill_at) {
      seen.timed_out = res.first_failed < 0;  // else: the grace after a failure ran out
      group.kill_running();
      seen.kill_at = clock_type::time_point::max();
    }
    if (!reaped) {
      const auto until = std::min(seen.kill_at, clock_type::now() + std::chrono::seconds(1));
      await_children(group.running_fds(), seen.orphaned ? -1 : options.watch_fd,
                     std::chrono::ceil<std::chrono::milliseconds>(until - clock_type::now()));
    }
  }
  group.close_all();
  seen.finish(res, options.timeout);
  return res;
}

}  // namespace merak::job
