// Consensus ADMM driven over CAF actors. The consensus side lives in the
// caller's scoped actor; each iteration is three fan-out/gather rounds:
//
//   local (zeta) --> theta_k + U1_k --> combine --> dual (zeta) --> residuals
//        --> finish: stop? rescale rho? --> [rho (factor) --> ok]
#include "actors/svm_consensus.hpp"

#include <caf/all.hpp>

#include <chrono>
#include <memory>

#include "actors/svm_messages.hpp"
#include "actors/svm_worker_actor.hpp"
#include "core/error.hpp"

namespace merak::actors {
namespace {

// Sends `msg...` to every worker, then waits for each reply in turn (the
// workers compute in parallel meanwhile). on_reply(k, reply).
template <class Reply, class OnReply, class... Ts>
void fan_out(caf::actor_system& sys, caf::scoped_actor& self, const std::vector<caf::actor>& ws,
             std::chrono::milliseconds timeout, const char* phase, int iteration,
             OnReply&& on_reply, const Ts&... msg) {
  using handle = decltype(self->request(ws[0], timeout, msg...));
  std::vector<handle> pending;
  pending.reserve(ws.size());
  for (const auto& w : ws) pending.push_back(self->request(w, timeout, msg...));
  for (size_t k = 0; k < pending.size(); ++k) {
    pending[k].receive([&](Reply& r) { on_reply(k, r); },
                       [&](caf::error& e) {
                         if (e == caf::sec::request_timeout)
                           fail("svm worker {} did not answer '{}' of iteration {} within {} ms", k,
                                phase, iteration, timeout.count());
                         fail("svm worker {} failed in '{}' of iteration {}: {}", k, phase,
                              iteration, sys.render(e));
                       });
  }
}

}  // namespace

svm::consensus_result consensus_fit_actors(caf::actor_system& sys, const svm::dataset& d,
                                           int workers, const svm::penalty& pen,
                                           const svm_actor_options& o) {
  const auto t0 = std::chrono::steady_clock::now();
  const svm::consensus_setup s = svm::plan_consensus(d, workers, pen, o.admm);
  caf::scoped_actor self{sys};
  std::vector<caf::actor> ws;
  // Workers are stopped on every way out, errors included.
  auto stop = [&] {
    for (auto& w : ws) self->send_exit(w, caf::exit_reason::user_shutdown);
  };
  std::unique_ptr<decltype(stop), void (*)(decltype(stop)*)> stopper(
      &stop, [](decltype(stop)* f) { (*f)(); });
  for (const auto& rows : s.rows)
    ws.push_back(spawn_svm_worker(
        sys, std::make_unique<svm::consensus_worker>(d.select_rows(rows), d.rows(), s.rho1, s.rho2,
                                                     o.admm.method, o.admm.dense_limit)));
  svm::consensus_reducer red(d.cols(), d.rows(), workers, pen, s.rho1, s.rho2, o.admm);
  std::vector<Eigen::VectorXd> sent(ws.size());
  svm::consensus_result res;
  for (;;) {
    const int it = red.iteration() + 1;
    if (o.kill_worker >= 0 && o.kill_worker < int(ws.size()) && it == o.kill_at)
      self->send_exit(ws[size_t(o.kill_worker)], caf::exit_reason::kill);
    fan_out<std::vector<double>>(
        sys, self, ws, o.timeout, "local", it,
        [&](size_t k, std::vector<double>& v) { sent[k] = to_eigen(v); }, svm_local_atom::value,
        to_vector(red.zeta()));
    for (size_t k = 0; k < sent.size(); ++k)
      if (sent[k].size() != d.cols() + 1)
        fail("svm worker {} sent {} numbers in iteration {}, expected {}", k, sent[k].size(), it,
             d.cols() + 1);
    const std::vector<double> zeta = to_vector(red.combine(sent));
    svm::worker_residuals sum;
    fan_out<std::vector<double>>(
        sys, self, ws, o.timeout, "dual", it,
        [&](size_t, std::vector<double>& v) { sum.add(unpack(v)); }, svm_dual_atom::value, zeta);
    const svm::consensus_decision dec = red.finish(sum);
    res.primal_residual = dec.primal, res.dual_residual = dec.dual;
    if (dec.rho_factor != 1)
      fan_out<caf::atom_value>(
          sys, self, ws, o.timeout, "rho", it, [](size_t, caf::atom_value&) {}, svm_rho_atom::value,
          dec.rho_factor);
    if (dec.stop) {
      res.converged = dec.converged;
      break;
    }
  }
  res.iterations = red.iteration();
  svm::finish_consensus_result(d, pen, o.admm, red, res);
  res.time_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return res;
}

svm::consensus_result consensus_fit_actors(const svm::dataset& d, int workers,
                                           const svm::penalty& pen, const svm_actor_options& o) {
  caf::actor_system_config cfg;
  cfg.set("scheduler.policy", caf::atom("sharing"));
  cfg.set("logger.console", caf::atom("none"));
  caf::actor_system sys{cfg};
  return consensus_fit_actors(sys, d, workers, pen, o);
}

}  // namespace merak::actors
