#pragma once
// `merak svm train --procs K [--listen HOST:PORT]` and `merak svm worker`:
// consensus ADMM across processes (actors/svm_remote.hpp, docs/svm.md
// "Multi-process consensus"). Internal to apps/svm_*.cpp.

#include <functional>
#include <string>
#include <vector>

#include "apps/commands.hpp"
#include "job/tls.hpp"
#include "svm/fit.hpp"
#include "svm/path.hpp"

namespace merak::apps {

struct svm_remote_train {
  std::string data, format;  // for the workers this command starts
  svm::fit_options fit;      // penalty, ADMM settings, standardize
  int procs = 0;             // worker processes
  std::string listen;        // HOST:PORT: wait for workers started elsewhere
  std::string token;         // empty: MERAK_JOB_TOKEN, else a random one
  job::tls_files tls;       // empty: in clear
  double timeout_s = 60;
  int threads = 0;
  int folds = 0;      // >= 2: cross-validate across the worker processes first
  bool warm = false;  // svm path: warm-started walks (actors::svm_remote_options::warm)
  bool json = false;
  std::string model;
};

// Runs the consensus side; without --listen it also starts the workers (this
// program, `svm worker`) on loopback and waits for them. Prints like
// `svm train`. Throws merak::error (apps/cli_main.cpp prints it, exit 1).
int run_svm_train_remote(const svm_remote_train& t);

// The "nonconvex" line of `svm train`'s text output (one process or many).
void print_nonconvex(bool lla, svm::lla_start start);

// `svm path --procs K`: the penalties of `pens` (a lambda grid, largest
// first) fitted by consensus over the same worker processes, with folds
// when t.folds >= 2 and then on all rows unless !full_fit; warm-started
// walks with t.warm, else one cold fit per penalty, each finished before the
// next (actors::consensus_path_remote). Each point goes to on_point as soon
// as it is known. t.fit.pen is ignored. Throws merak::error naming the
// lambda.
void run_svm_path_remote(const svm_remote_train& t, const std::vector<svm::penalty>& pens,
                         bool full_fit,
                         const std::function<void(const svm::path_point&)>& on_point);

// Registers `svm worker` on the `svm` sub-command.
action add_svm_worker_command(CLI::App& svm);

}  // namespace merak::apps
