// Consensus ADMM across processes: the entry points of the consensus side
// (a path of fits over svm_remote_backend, walked by svm::fit_path) and the
// worker process.
//
//   consensus side:  svm_remote_backend (gate, join) --> svm::fit_path over it --> done
//   worker process:  connect --> hello --> [verdict "" ?] --> serve until done
#include "actors/svm_remote.hpp"

#include <caf/all.hpp>
#include <caf/io/all.hpp>

#include <optional>

#include "actors/svm_messages.hpp"
#include "actors/svm_remote_backend.hpp"
#include "actors/svm_worker_actor.hpp"
#include "core/error.hpp"
#include "job/gate.hpp"
#include "svm/path.hpp"

namespace merak::actors {

svm_remote_result consensus_fit_remote(int workers, const svm::penalty& pen,
                                       const svm_remote_options& options) {
  return consensus_path_remote(workers, {pen}, options).front();
}

std::vector<svm_remote_result> consensus_path_remote(
    int workers, const std::vector<svm::penalty>& penalties, const svm_remote_options& options,
    const std::function<void(size_t, const svm_remote_result&)>& on_point) {
  if (workers < 1) fail("--procs must be at least 1 (got {})", workers);
  if (options.token.empty()) fail("no job token for the svm workers");
  if (penalties.empty()) fail("no lambda to fit");
  for (const auto& pen : penalties) pen.validate();
  if (!options.full_fit && options.folds < 2) fail("--cv-only needs --folds F (F >= 2)");
  if (options.admm.max_iter < 1)
    fail("--max-iter must be at least 1 (got {})", options.admm.max_iter);
  svm_remote_backend backend(workers, options);
  std::vector<svm_remote_result> results(penalties.size());
  for (auto& result : results) result.join_s = backend.join_seconds();
  // Each point's result: the fit on all rows (handed out by the backend
  // right after it), with the point's CV fields.
  const auto take_point = [&](size_t i, const svm::path_point& point) {
    svm_remote_result& result = results[i];
    if (options.full_fit) {
      result = backend.last_fit();
      result.join_s = backend.join_seconds();
    }
    result.lla = point.lla;
    if (options.folds >= 2) {
      result.cv_accuracy = point.cv_accuracy, result.cv_mean_nnz = point.cv_mean_nnz;
      result.cv_mean_iterations = point.cv_mean_iterations, result.cv_time_s = point.cv_time_s;
      result.fold_accuracy = point.cv_fold_accuracy;
    }
    if (on_point) on_point(i, result);
  };
  const svm::path_schedule schedule{options.folds, options.warm, options.full_fit};
  svm::fit_path(penalties, schedule, backend, take_point);
  backend.finish();
  return results;
}

void run_svm_worker_process(svm::dataset data, const svm_worker_process_options& options) {
  if (options.world < 1 || options.rank < 0 || options.rank >= options.world)
    fail("svm worker: --rank {} is out of range for --world {}", options.rank, options.world);
  if (options.token.empty())
    fail("svm worker {}: no job token (pass --token or set MERAK_JOB_TOKEN)", options.rank);
  // Through the gate: both sides prove the token, then CAF connects over
  // the tunnel. The tunnel outlives the actor system (its sockets close
  // first).
  const std::string where = fmt::format("the consensus side at {}:{}", options.host, options.port);
  std::optional<job::gate_tunnel> tunnel;
  tunnel.emplace(options.host, options.port,
                 job::job_credentials{options.token, job::make_tls(options.tls)}, "svm",
                 options.timeout, fmt::format("svm worker {}", options.rank), where);
  caf::actor_system_config cfg;
  configure_svm_remote(cfg);
  caf::actor_system sys{cfg};
  auto x =
      sys.middleman().remote_actor<svm_rendezvous_api>("127.0.0.1", uint16_t(tunnel->local_port()));
  if (!x) fail("svm worker {}: cannot reach {}: {}", options.rank, where, sys.render(x.error()));
  svm_rendezvous_api consensus = std::move(*x);
  const auto idle = options.idle.count() > 0 ? options.idle : 2 * options.timeout;
  svm_worker_api worker =
      spawn_svm_shard_worker(sys, options.rank, options.world, std::move(data), options.whole_file,
                             caf::actor_cast<caf::actor>(consensus), idle);
  caf::scoped_actor self{sys};
  self->monitor(worker);
  std::string verdict, error;
  bool answered = false;
  self->request(consensus, options.timeout,
                svm_hello{int32_t(options.rank), int32_t(options.world), worker})
      .receive(
          [&](svm_verdict& v) {
            verdict = std::move(v.why);
            answered = true;
          },
          [&](caf::error& e) { error = sys.render(e); });
  if (!answered || !verdict.empty()) {
    self->send_exit(worker, caf::exit_reason::user_shutdown);
    if (!answered)
      fail("svm worker {}: no answer to its hello from the consensus side at {}:{}: {}",
           options.rank, options.host, options.port, error);
    fail("svm worker {}: the consensus side at {}:{} refused it: {}", options.rank, options.host,
         options.port, verdict);
  }
  caf::error reason;
  self->receive([&](caf::down_msg& dm) { reason = dm.reason; });
  if (reason == caf::exit_reason::user_shutdown)
    fail(
        "svm worker {}: the consensus side stopped the fit before it finished (its own error "
        "says why)",
        options.rank);
  if (reason && reason != caf::exit_reason::normal)
    fail("svm worker {}: {}", options.rank, sys.render(reason));
}

}  // namespace merak::actors
