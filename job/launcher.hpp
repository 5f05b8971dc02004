#pragma once
// Local launcher: runs N copies of a program as the ranks of one job on this
// host, the way torchrun does: each child gets RANK, WORLD_SIZE,
// MASTER_ADDR=127.0.0.1, MASTER_PORT (a free port), MERAK_JOB_TOKEN and
// MERAK_JOB_ID (random per job) in its environment, which resolve_bootstrap() reads.
//
// The launcher reaps its children. When one fails (non-zero exit or a
// signal) the others get `grace` to notice and exit on their own (so they can
// report the peer that failed), then they are killed. Children die with the
// launcher (PR_SET_PDEATHSIG). A SIGINT, SIGTERM or SIGHUP to the launcher
// is passed on to its children (supervise).
//
// Shared memory: the ranks' UCX files go to a directory of the job
// (UCX_POSIX_DIR, unless set) that the launcher removes when its ranks have
// ended; the launcher also sweeps /dev/shm of the shared memory of merak
// processes of this user that have ended (sweep_shared_memory) when it
// starts and when its ranks have ended, so a rank killed before it could
// unlink its rings leaves nothing behind.

#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace merak::job {

struct launch_options {
  int procs = 2;  // processes started here: ranks first_rank .. first_rank + procs - 1
  std::vector<std::string> argv;           // argv[0]: the program (a path)
  std::map<std::string, std::string> env;  // added to every child's environment
  // Last word on one rank's environment (tests: a wrong token for one rank).
  std::function<void(int rank, std::map<std::string, std::string>& env)> rank_env;
  std::chrono::milliseconds grace{5000};  // after a first failure
  std::chrono::milliseconds timeout{0};   // whole job; 0: none
  // A job spread over several hosts (`merak node`): this host's share of it.
  // Defaults: the whole job is here, rank 0 listens on 127.0.0.1 at a free
  // port, and the token is random.
  int first_rank = 0;
  int world_size = 0;  // 0: procs
  std::string master_addr;
  int master_port = 0;
  std::string token;
  // The job's id (MERAK_JOB_ID, job/identity.hpp). Empty: MERAK_JOB_ID of
  // `env` or this process, else a random one when the whole job runs here,
  // else none.
  std::string job_id;
  // >= 0: a descriptor (the node's stdin, fed by a remote launcher through
  // ssh) whose end of file means the launcher is gone: the ranks are killed.
  int watch_fd = -1;
};

struct launch_result {
  std::vector<int> exit_code;  // per child; -1 when it died by a signal
  std::vector<int> signal;     // per child; 0 when it exited
  int first_failed = -1;       // the child that failed first; -1: all succeeded
  std::string message;         // names the first failed child and how it failed
  int interrupted = 0;         // the signal that stopped the launcher's job; 0: none
  bool ok() const { return first_failed < 0; }
};

// Starts the ranks (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT,
// MERAK_JOB_TOKEN, LOCAL_RANK, LOCAL_WORLD_SIZE) and waits for all of them.
// Throws merak::error when a child cannot be started. When a signal stopped
// the job (launch_result::interrupted), this process ends by that signal
// once the ranks have ended and their shared memory is gone.
launch_result launch_local(const launch_options& options);

// One process of a supervised group.
struct child_spec {
  std::string name;                        // in messages: "rank 3", "host n2 (ranks 2-3)"
  std::vector<std::string> argv;           // argv[0]: a path, or a name looked up on PATH
  std::map<std::string, std::string> env;  // its whole environment
  // Non-empty: written to the child's stdin through a pipe that stays open
  // until the group ends (its end of file tells a remote node the launcher
  // is gone). Empty: the child inherits stdin.
  std::string stdin_text;
};

struct supervise_options {
  std::chrono::milliseconds grace{5000};
  std::chrono::milliseconds timeout{0};
  int watch_fd = -1;  // as launch_options::watch_fd
};

// Starts the children and reaps them. When one fails (non-zero exit or a
// signal) the others get `grace` to notice and exit on their own, then they
// are killed; likewise at the timeout and at end of file on watch_fd. A
// SIGINT, SIGTERM or SIGHUP to this process while it supervises is sent on
// to the children, which then get `grace` before they are killed; the
// result names the signal (interrupted) and the caller ends by it
// (end_by_signal) once it has cleaned up.
// Children die with this process (PR_SET_PDEATHSIG). Throws merak::error when
// a child cannot be started.
launch_result supervise(const std::vector<child_spec>& children, const supervise_options& options);

// Ends this process by signal `sig` (its default action), as the shell
// expects of a program stopped by it.
[[noreturn]] void end_by_signal(int sig);

// This process's environment as a map, without the rank variables of a
// launcher that started it (a launcher's ranks must not inherit its own).
std::map<std::string, std::string> launcher_environment();

// One line of a hostfile: `HOST [slots=K]` (Open MPI's form; `#` starts a
// comment). A host runs `slots` ranks (default 1), in file order.
struct host_entry {
  std::string name;
  int slots = 1;
  int line = 0;  // in the file, for messages
};

// Reads a hostfile. Throws merak::error naming the file and line of an
// unknown field, a bad slot count or a host listed twice, and an empty file.
std::vector<host_entry> read_hostfile(const std::string& path);

// `s` quoted for a POSIX shell (ssh hands the remote command to one).
std::string shell_quote(const std::string& s);

// This program's own path (/proc/self/exe), to re-execute it as workers.
std::string self_executable();

}  // namespace merak::job
