#pragma once
// `merak svm train --procs K [--listen HOST:PORT]` and `merak svm worker`:
// consensus ADMM across processes (actors/svm_remote.hpp, docs/svm.md
// "Multi-process consensus"). Internal to apps/svm_*.cpp.

#include <functional>
#include <string>
#include <vector>

#include "apps/commands.hpp"
#include "svm/fit.hpp"
#include "svm/path.hpp"

namespace merak::apps {

struct svm_remote_train {
  std::string data, format;  // for the workers this command starts
  svm::fit_options fit;      // penalty, ADMM settings, standardize
  int procs = 0;             // worker processes
  std::string listen;        // HOST:PORT: wait for workers started elsewhere
  std::string token;         // empty: MERAK_JOB_TOKEN, else a random one
  double timeout_s = 60;
  int threads = 0;
  int folds = 0;  // >= 2: cross-validate across the worker processes first
  bool json = false;
  std::string model;
};

// Runs the consensus side; without --listen it also starts the workers (this
// program, `svm worker`) on loopback and waits for them. Prints like
// `svm train`. Throws merak::error (apps/main.cpp prints it, exit 1).
int run_svm_train_remote(const svm_remote_train& t);

// `svm path --procs K`: one cold consensus fit per penalty of `pens` (a
// lambda grid, largest first) over the same worker processes, each penalty
// finished (its folds with t.folds >= 2, then the fit on all rows unless
// !full_fit) before the next and handed to on_point at once. t.fit.pen is
// ignored. Throws merak::error naming the lambda.
void run_svm_path_remote(const svm_remote_train& t, const std::vector<svm::penalty>& pens,
                         bool full_fit,
                         const std::function<void(const svm::path_point&)>& on_point);

// Registers `svm worker` on the `svm` sub-command.
action add_svm_worker_command(CLI::App& svm);

}  // namespace merak::apps
