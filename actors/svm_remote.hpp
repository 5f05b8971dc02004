#pragma once
// Consensus ADMM across processes (docs/svm.md, "Multi-process consensus").
// The consensus side publishes a rendezvous actor with CAF's network layer
// (caf::io middleman) on loopback, behind an authenticating gate
// (job/gate.hpp) on the address it listens on; each worker process reads
// its own rows, proves the job token to the gate (which proves it back; the
// token never crosses the network), connects through it and says hello with
// its rank; only then does data flow. The iterations are the in-process ones
// (actors/svm_consensus.cpp) over remote worker handles; the column
// statistics for standardising, and the margins for the bias and the
// objective (after every run: LLA's steps compare F), are gathered from the
// workers, so the consensus side never reads the data. Messages:
// actors/svm_messages.hpp.

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "job/tls.hpp"
#include "svm/consensus.hpp"

namespace merak::actors {

struct svm_remote_options {
  svm::consensus_options admm;
  bool standardize = true;                   // scale columns by 1/sd over all workers' rows
  std::string host = "127.0.0.1";            // where to listen; loopback unless told otherwise
  uint16_t port = 0;                         // 0: a free port (the kernel's pick)
  std::string token;                         // the job token every worker must present; not empty
  job::tls_files tls;                        // TLS on the gate (job/tls.hpp); empty: in clear
  std::chrono::milliseconds timeout{60000};  // for all workers to join, and for each phase
  // Called once, when the consensus side listens, with the port: start the
  // worker processes here (or tell the user where to point them).
  std::function<void(uint16_t port)> on_listening;
  // Polled while workers join: a non-empty text ends the wait with an error
  // that quotes it (a launcher whose worker processes exited early).
  std::function<std::string()> abort_check;
  // >= 2: first cross-validate with this many folds (sample i held out in
  // fold i mod folds), one consensus fit per fold on the same workers, each
  // worker training on its block of the fold's training rows and predicting
  // its block of the held-out rows (the split of --workers K --folds F);
  // then the fit on all rows. Needs workers that read the whole file.
  int folds = 0;
  // false (with folds >= 2, consensus_path_remote): no fit on all rows; the
  // results carry only the CV fields.
  bool full_fit = true;
  // consensus_path_remote: walk the grid warm-started (as svm::fit_path),
  // each fold's rows and then all rows in turn, each fit continuing from
  // the previous one's state; false: one cold fit per penalty, each
  // penalty finished before the next.
  bool warm = false;
};

struct svm_remote_result {
  svm::consensus_result fit;  // w, b and objective on the standardised features
  Eigen::VectorXd scale;      // (p): weights in the data's units are w_j * scale_j
  int64_t samples = 0, features = 0;
  double accuracy = 0;  // training data, predicted +1 when x^T w + b >= 0
  bool lla = false;     // a nonconvex penalty fitted by LLA (else direct)
  double join_s = 0;    // from listening until every worker joined
  // With folds >= 2 (as svm::cv_result): held-out accuracy pooled over all
  // samples, per fold, the mean non-zeros and iterations of the fold fits,
  // and their time (each from its row selection to its evaluation).
  double cv_accuracy = 0, cv_mean_nnz = 0, cv_mean_iterations = 0, cv_time_s = 0;
  std::vector<double> fold_accuracy;
};

// Runs the consensus side of a fit over `workers` worker processes (ranks
// 0..workers-1, each started with run_svm_worker_process). Returns when the
// fit is done and the workers were told to stop. Throws merak::error: the
// address cannot be bound; a worker did not join within the timeout (naming
// the missing ranks and any refused peers); a worker failed, went down or
// did not answer a phase in time (naming its rank, the phase and the
// iteration); the workers' data disagree. Blocks the calling thread, which
// must not be a CAF worker thread; runs its own actor system.
svm_remote_result consensus_fit_remote(int workers, const svm::penalty& pen,
                                       const svm_remote_options& options);

// A path over the same worker processes, in the order of `penalties` (a
// decreasing lambda grid for a warm path): svm::fit_path's walk over an
// svm_remote_backend (actors/svm_remote_backend.hpp). Cold (options.warm
// false): one cold consensus fit per penalty, each penalty finished (its
// folds, then its fit on all rows) before the next; every fit selects its
// rows anew, so each result equals consensus_fit_remote with that penalty
// alone. Warm: each fold's rows, then all rows, walk the grid, every fit
// starting from the state the previous one ended in. on_point (when set)
// gets each result as soon as it is known (warm: during the walk over all
// rows). Returns the results in the order of `penalties`. Throws as
// consensus_fit_remote (with more than one penalty the message starts with
// "lambda L: "), and for an empty list or full_fit false without folds.
std::vector<svm_remote_result> consensus_path_remote(
    int workers, const std::vector<svm::penalty>& penalties, const svm_remote_options& options,
    const std::function<void(size_t, const svm_remote_result&)>& on_point = {});

struct svm_worker_process_options {
  std::string host = "127.0.0.1";
  uint16_t port = 0;
  int rank = 0, world = 1;
  std::string token;
  job::tls_files tls;  // empty: in clear
  // `data` passed to run_svm_worker_process is the whole file (the worker
  // takes rows [n R/K, n (R+1)/K) itself, and its fold rows when the
  // consensus side cross-validates); false: it holds this rank's rows only.
  bool whole_file = true;
  // Bound on reaching the consensus side (retried every 100 ms meanwhile).
  std::chrono::milliseconds timeout{60000};
  // The worker gives up after this long without a message from the
  // consensus side (0: twice `timeout`).
  std::chrono::milliseconds idle{0};
};

// The worker side: joins the consensus side at host:port with `data` (see
// whole_file) and serves it until it says the fit is done. Throws
// merak::error: the consensus side cannot be reached in time, refuses the
// hello (the reason: wrong token, rank taken, ...), goes away, or stays
// silent past `idle`. Blocks; runs its own actor system.
void run_svm_worker_process(svm::dataset data, const svm_worker_process_options& options);

}  // namespace merak::actors
