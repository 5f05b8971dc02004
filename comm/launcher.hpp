#pragma once
// Local launcher: runs N copies of a program as the ranks of one job on this
// host, the way torchrun does: each child gets RANK, WORLD_SIZE,
// MASTER_ADDR=127.0.0.1, MASTER_PORT (a free port) and MERAK_JOB_TOKEN (random
// per job) in its environment, which resolve_bootstrap() reads.
//
// The launcher reaps its children. When one fails (non-zero exit or a
// signal) the others get `grace` to notice and exit on their own (so they can
// report the peer that failed), then they are killed. Children die with the
// launcher (PR_SET_PDEATHSIG).

#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace merak::comm {

struct launch_options {
  int procs = 2;
  std::vector<std::string> argv;           // argv[0]: the program (a path)
  std::map<std::string, std::string> env;  // added to every child's environment
  // Last word on one rank's environment (tests: a wrong token for one rank).
  std::function<void(int rank, std::map<std::string, std::string>& env)> rank_env;
  std::chrono::milliseconds grace{5000};  // after a first failure
  std::chrono::milliseconds timeout{0};   // whole job; 0: none
};

struct launch_result {
  std::vector<int> exit_code;  // per rank; -1 when it died by a signal
  std::vector<int> signal;     // per rank; 0 when it exited
  int first_failed = -1;       // the rank that failed first; -1: all succeeded
  std::string message;         // names the first failed rank and how it failed
  bool ok() const { return first_failed < 0; }
};

// Starts the ranks and waits for all of them. Throws merak::error when a
// child cannot be started.
launch_result launch_local(const launch_options& o);

// This program's own path (/proc/self/exe), to re-execute it as workers.
std::string self_executable();

// A random job token (hex, from /dev/urandom).
std::string random_token();

}  // namespace merak::comm
