#pragma once
// Internal to actors/svm_remote.cpp: the consensus side of fits over worker
// processes (actors/svm_remote.hpp) as a path backend (svm/path.hpp), so
// that svm::fit_path walks the grid over remote workers as it does on one
// machine. Messages: actors/svm_messages.hpp.
//
//   constructor     gate + publish rendezvous --> join (hello, per rank)
//   select_rows     svm_select (unless the workers hold those rows, not yet set up)
//   fit             [svm_select again] --> stats --> setup   (a cold start only)
//                   --> iterations (drive_consensus) --> eval, per consensus run
//   score_held_out  svm_test
//   destructor      svm_done to every worker after finish(), else an exit
//
// A worker takes each selection's rows anew and scales them at setup, so a
// cold start on rows already set up selects them again first. The workers
// join holding their block of all rows, not yet set up: a path whose first
// selection is all rows selects nothing until a fit must start cold, so a
// warm path also runs on presharded workers (which refuse a selection).
// Used from the thread that constructed it, which must not be a CAF worker
// thread (it blocks on replies).

#include <caf/all.hpp>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "actors/svm_messages.hpp"
#include "actors/svm_remote.hpp"
#include "job/gate.hpp"
#include "svm/path.hpp"

namespace merak::actors {

// The actor system settings of both sides: the svm message types, the
// network layer, the sharing scheduler. Returns `config`.
caf::actor_system_config& configure_svm_remote(caf::actor_system_config& config);

class svm_remote_backend final : public svm::path_backend {
 public:
  using clock_type = std::chrono::steady_clock;

  // Listens behind the gate (options.host, options.port), calls
  // options.on_listening with the port, and waits until ranks 0..workers-1
  // joined. Throws merak::error as consensus_fit_remote (no listening
  // socket, a missing rank after options.timeout, abort_check's reason).
  svm_remote_backend(int workers, const svm_remote_options& options);
  ~svm_remote_backend() override;
  svm_remote_backend(const svm_remote_backend&) = delete;
  svm_remote_backend& operator=(const svm_remote_backend&) = delete;

  void select_rows(int folds, int fold) override;
  // Continues (warm) when the workers hold the last fit's state and the
  // direct prox's threshold allows the rho1 it ended with; else starts cold.
  svm::path_fit fit(const svm::penalty& pen, bool warm) override;
  // Counts the test phase's time.
  svm::held_out_score score_held_out() override;

  // The last fit in full: weights, scaling, sizes, training accuracy.
  const svm_remote_result& last_fit() const { return last_; }
  // From listening until every worker joined.
  double join_seconds() const { return join_seconds_; }
  // The work is done: the destructor tells the workers so (svm_done) instead
  // of stopping them with an exit.
  void finish() { finished_ = true; }

 private:
  // The rows the workers hold, set up for consensus fits: their counts, the
  // column scaling, and where the next fit starts (the rhos the workers
  // factored for, no zeta; after a fit, where it ended).
  struct prepared_rows {
    std::vector<int64_t> rows;  // per worker
    int64_t n = 0, p = 0;
    Eigen::VectorXd scale;
    svm::consensus_carry carry;
  };
  // Stops the rendezvous and the workers on every way out of the consensus
  // side, the constructor's errors included.
  struct stop_guard {
    svm_remote_backend* owner;
    ~stop_guard() { owner->stop_everyone(); }
  };

  void join_workers();
  std::string refusals(std::string refused) const;
  void select_phase(int folds, int fold);
  void prepare(const svm::penalty& pen);
  void evaluate(const Eigen::VectorXd& w, Eigen::VectorXd& margins, Eigen::VectorXd& labels);
  void iterate(const svm::penalty& pen, clock_type::time_point start);
  bool can_continue(const svm::penalty& pen) const;
  void stop_everyone();

  const int workers_;
  const svm_remote_options options_;
  // The gate outlives the actor system, whose sockets close first, so the
  // last messages (svm_done) reach the workers.
  std::optional<job::gate_server> gate_;
  caf::actor_system_config config_;
  caf::actor_system system_;
  caf::scoped_actor self_;
  std::vector<svm_worker_api> worker_handles_;  // rank k at k; empty until it joins
  svm_rendezvous_api rendezvous_;
  double join_seconds_ = 0;
  bool finished_ = false;

  // The consensus settings, with `automatic` resolved on the whole data set
  // (all rows, held-out ones included) when the first rows are prepared:
  // every fit, folds included, uses one method.
  svm::consensus_options consensus_;
  bool method_resolved_ = false;
  // The selection the workers hold, whether a setup consumed it, and its
  // held-out rows per worker (and in all).
  int selected_folds_ = 0, selected_fold_ = 0;
  bool rows_set_up_ = false;
  std::vector<int64_t> held_out_rows_;
  int64_t held_out_total_ = 0;
  prepared_rows prepared_;
  svm_remote_result last_;
  stop_guard stop_guard_{this};  // last: runs first on the way out
};

}  // namespace merak::actors
