// Consensus ADMM driven over CAF actors. The consensus side lives in the
// caller's scoped actor; each iteration is one phase (two when rho changes),
// sent to every worker and gathered from every worker (actors/svm_phase.hpp):
//
//   [iteration 1: local (zeta) --> theta_k + U1_k]
//   combine --> dual (zeta) --> residuals, next theta_k + U1_k (local step
//        run by the worker right after its dual step, against the same zeta)
//        --> finish: stop? rescale rho? --> [rho (factor) --> theta_k + U1_k redone]
#include "actors/svm_consensus.hpp"

#include <caf/all.hpp>

#include <chrono>
#include <memory>

#include "actors/svm_messages.hpp"
#include "actors/svm_phase.hpp"
#include "actors/svm_worker_actor.hpp"
#include "core/error.hpp"

namespace merak::actors {

namespace detail {

void drive_consensus(caf::actor_system& sys, caf::scoped_actor& self,
                     const std::vector<svm_worker_api>& ws, int64_t p, svm::consensus_reducer& red,
                     const svm_actor_options& options, svm::consensus_result& res) {
  std::vector<Eigen::VectorXd> sent(ws.size());
  auto take = [&](int k, svm_vector& v, int it) {
    if (int64_t(v.v.size()) != p + 1)
      fail("svm worker {} sent {} numbers in iteration {}, expected {}", k, v.v.size(), it, p + 1);
    sent[size_t(k)] = to_eigen(v);
  };
  for (;;) {
    const int it = red.iteration() + 1;
    if (options.kill_worker >= 0 && options.kill_worker < int(ws.size()) && it == options.kill_at)
      self->send_exit(ws[size_t(options.kill_worker)], caf::exit_reason::kill);
    // Later iterations' local steps come with the previous dual step.
    if (it == 1)
      svm_phase<svm_step_reply>(
          sys, self, ws, options.timeout, "local", it,
          [&](int k, svm_step_reply& r) { take(k, r.theta_u, it); },
          svm_local{to_vector(red.zeta())});
    const svm_dual dual{to_vector(red.combine(sent))};
    svm::worker_residuals sum;
    svm_phase<svm_dual_reply>(
        sys, self, ws, options.timeout, "dual", it,
        [&](int k, svm_dual_reply& d) {
          svm::worker_residuals r;
          if (!unpack(d.residuals, r))
            fail("svm worker {} sent {} residuals in iteration {}, expected 6", k,
                 d.residuals.v.size(), it);
          sum.add(r);
          take(k, d.theta_u, it + 1);
        },
        dual);
    const svm::consensus_decision dec = red.finish(sum);
    res.primal_residual = dec.primal, res.dual_residual = dec.dual;
    if (dec.stop) {
      res.converged = dec.converged;
      break;
    }
    if (dec.rho_factor != 1)
      svm_phase<svm_step_reply>(
          sys, self, ws, options.timeout, "rho", it,
          [&](int k, svm_step_reply& r) { take(k, r.theta_u, it + 1); }, svm_rho{dec.rho_factor});
  }
  res.iterations = red.iteration();
}

}  // namespace detail

svm::consensus_result consensus_fit_actors(caf::actor_system& sys, const svm::dataset& d,
                                           int workers, const svm::penalty& pen,
                                           const svm_actor_options& options) {
  const auto t0 = std::chrono::steady_clock::now();
  const svm::consensus_setup s = svm::plan_consensus(d, workers, pen, options.admm);
  caf::scoped_actor self{sys};
  std::vector<svm_worker_api> ws;
  // Workers are stopped on every way out, errors included.
  auto stop = [&] {
    for (auto& w : ws) self->send_exit(w, caf::exit_reason::user_shutdown);
  };
  std::unique_ptr<decltype(stop), void (*)(decltype(stop)*)> stopper(
      &stop, [](decltype(stop)* f) { (*f)(); });
  for (const auto& rows : s.rows) {
    ws.push_back(spawn_svm_worker(
        sys, int(ws.size()),
        std::make_unique<svm::consensus_worker>(d.select_rows(rows), d.rows(), s.rho1, s.rho2,
                                                options.admm.method, options.admm.dense_limit)));
    self->monitor(ws.back());
  }
  // Each run (one, or LLA's weighted-L1 runs) continues on the same worker
  // actors, which keep their state.
  const svm::consensus_run run = [&](const svm::penalty& rpen, const Eigen::VectorXd* weights,
                                     svm::consensus_carry& carry, svm::consensus_result& res) {
    svm::consensus_reducer red(d.cols(), d.rows(), workers, rpen, carry, options.admm);
    if (weights) red.set_l1_weights(*weights);
    detail::drive_consensus(sys, self, ws, d.cols(), red, options, res);
    svm::finish_consensus_result(d, pen, options.admm, red, res);
    carry = red.carry();
  };
  svm::consensus_carry carry{{}, s.rho1, s.rho2};
  svm::consensus_result res =
      svm::consensus_solve(d.rows(), d.cols(), pen, options.admm, carry, run);
  res.time_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return res;
}

svm::consensus_result consensus_fit_actors(const svm::dataset& d, int workers,
                                           const svm::penalty& pen,
                                           const svm_actor_options& options) {
  caf::actor_system_config cfg;
  cfg.set("scheduler.policy", caf::atom("sharing"));
  cfg.set("logger.console", caf::atom("none"));
  caf::actor_system sys{cfg};
  return consensus_fit_actors(sys, d, workers, pen, options);
}

}  // namespace merak::actors
