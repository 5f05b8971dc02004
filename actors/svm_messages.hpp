#pragma once
// Messages between the consensus ADMM actors (CAF 0.17), in one process and
// across processes (docs/svm.md, "Multi-process consensus"): one struct per
// message with inspect(), and a typed interface per role. Included only by
// actors/svm_*.cpp.
//
// Vectors travel as svm_vector: in one process it is moved, not copied;
// across processes its inspect() writes the doubles as one block of bytes
// (little-endian hosts assumed, as everywhere in merak), not element by
// element. Every worker reply starts with svm_from: the worker's rank and,
// when the maths threw, what failed (the rest of the reply is then empty).
// The consensus side sends phases with plain sends and gathers the replies
// as messages, so the same receive also sees each worker's `down`.
//
//   consensus -> worker k                 worker k -> consensus
//   svm_local(zeta)   first iteration     svm_step_reply(theta_k + U1_k)
//   svm_dual(zeta)                        svm_dual_reply(residuals: 6 numbers,
//                                           next theta_k + U1_k against zeta)
//   svm_rho(factor)                       svm_step_reply(theta_k + U1_k redone
//                                           with the rhos scaled, duals rescaled)
//   worker processes only, before and after the iterations:
//   svm_stats                             svm_stats_reply(rows, cols, [sum; sq_sum])
//   svm_setup(scale, n, p, rho1, rho2,    svm_setup_reply: shard scaled, factored
//             method, dense_limit)
//   svm_eval(w)                           svm_margins_reply(X_k w, y_k)
//   cross-validation (--procs K --folds F), before the stats of each fit:
//   svm_select(folds, fold): train on     svm_select_reply(training rows,
//     fold `fold`'s training rows            held-out rows)
//     (folds 0: all rows), hold out the rest
//   svm_test(w in the data's units)       svm_margins_reply(X_test_k w, y_test_k)
//   svm_done                              - (the worker stops)
//
//   worker process -> rendezvous (the published actor of the consensus side):
//   svm_hello(rank, world, worker) -> svm_verdict: "" accepted, else why not
//   (the connection proved the job token at the gate before: job/gate.hpp)
//   rendezvous -> consensus side: svm_joined(rank, worker), svm_refused(why)

#include <caf/all.hpp>

#include <cstring>
#include <string>
#include <vector>

#include "actors/inspect.hpp"
#include "svm/consensus.hpp"

namespace merak::actors {

struct svm_vector {
  std::vector<double> v;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, svm_vector& x) {
  wire_bytes w;
  if (Inspector::reads_state)
    w.bytes.assign(reinterpret_cast<const char*>(x.v.data()),
                   reinterpret_cast<const char*>(x.v.data() + x.v.size()));
  auto load = caf::meta::load_callback([&]() -> caf::error {
    if (w.bytes.size() % sizeof(double) != 0) return caf::sec::invalid_argument;
    x.v.resize(w.bytes.size() / sizeof(double));
    if (!w.bytes.empty()) std::memcpy(x.v.data(), w.bytes.data(), w.bytes.size());
    return caf::none;
  });
  return f(caf::meta::type_name("merak.svm_vector"), w, load);
}

// The worker a reply comes from, and what failed ("" when nothing did).
struct svm_from {
  int32_t rank = 0;
  std::string error;
};

struct svm_local {
  svm_vector zeta;
};
struct svm_dual {
  svm_vector zeta;
};
struct svm_rho {
  double factor = 1;
};
struct svm_stats {};
struct svm_setup {
  svm_vector scale;
  int64_t n_total = 0, p = 0;
  double rho1 = 0, rho2 = 0;
  int32_t method = 0;
  int64_t dense_limit = 0;
};
struct svm_eval {
  svm_vector w;
};
struct svm_select {
  int32_t folds = 0, fold = 0;
};
struct svm_test {
  svm_vector w;
};
struct svm_done {};
struct svm_tick {};  // worker -> itself: the idle check

struct svm_step_reply {
  svm_from from;
  svm_vector theta_u;  // theta_k + U1_k
};
struct svm_dual_reply {
  svm_from from;
  svm_vector residuals;  // pack(worker_residuals)
  svm_vector theta_u;    // the next iteration's local step
};
struct svm_stats_reply {
  svm_from from;
  int64_t rows = 0, cols = 0;
  svm_vector sums;  // [column sums; column sums of squares]
};
struct svm_setup_reply {
  svm_from from;
};
struct svm_select_reply {
  svm_from from;
  int64_t train_rows = 0, test_rows = 0;
};
struct svm_margins_reply {
  svm_from from;
  svm_vector margins, labels;
};

using svm_worker_api = caf::typed_actor<caf::replies_to<svm_local>::with<svm_step_reply>,
                                        caf::replies_to<svm_dual>::with<svm_dual_reply>,
                                        caf::replies_to<svm_rho>::with<svm_step_reply>,
                                        caf::replies_to<svm_stats>::with<svm_stats_reply>,
                                        caf::replies_to<svm_setup>::with<svm_setup_reply>,
                                        caf::replies_to<svm_eval>::with<svm_margins_reply>,
                                        caf::replies_to<svm_select>::with<svm_select_reply>,
                                        caf::replies_to<svm_test>::with<svm_margins_reply>,
                                        caf::reacts_to<svm_done>, caf::reacts_to<svm_tick>>;

struct svm_hello {
  int32_t rank = 0, world = 0;
  svm_worker_api worker;
};
struct svm_verdict {
  std::string why;  // "" accepted
};
using svm_rendezvous_api = caf::typed_actor<caf::replies_to<svm_hello>::with<svm_verdict>>;

struct svm_joined {
  int32_t rank = 0;
  svm_worker_api worker;
};
struct svm_refused {
  std::string why;
};
// The consensus side, as the rendezvous sees it.
using svm_consensus_api = caf::typed_actor<caf::reacts_to<svm_joined>, caf::reacts_to<svm_refused>>;

MERAK_INSPECT(svm_from, x.rank, text_ref{x.error})
MERAK_INSPECT(svm_local, x.zeta)
MERAK_INSPECT(svm_dual, x.zeta)
MERAK_INSPECT(svm_rho, x.factor)
MERAK_INSPECT(svm_stats)
MERAK_INSPECT(svm_setup, x.scale, x.n_total, x.p, x.rho1, x.rho2, x.method, x.dense_limit)
MERAK_INSPECT(svm_eval, x.w)
MERAK_INSPECT(svm_select, x.folds, x.fold)
MERAK_INSPECT(svm_test, x.w)
MERAK_INSPECT(svm_done)
MERAK_INSPECT(svm_tick)
MERAK_INSPECT(svm_step_reply, x.from, x.theta_u)
MERAK_INSPECT(svm_dual_reply, x.from, x.residuals, x.theta_u)
MERAK_INSPECT(svm_stats_reply, x.from, x.rows, x.cols, x.sums)
MERAK_INSPECT(svm_setup_reply, x.from)
MERAK_INSPECT(svm_select_reply, x.from, x.train_rows, x.test_rows)
MERAK_INSPECT(svm_margins_reply, x.from, x.margins, x.labels)
MERAK_INSPECT(svm_hello, x.rank, x.world, x.worker)
MERAK_INSPECT(svm_verdict, text_ref{x.why})
MERAK_INSPECT(svm_joined, x.rank, x.worker)
MERAK_INSPECT(svm_refused, text_ref{x.why})

// Every message type above, for a system that talks to other processes.
inline void add_svm_message_types(caf::actor_system_config& cfg) {
#define MERAK_SVM_MESSAGE(T) cfg.add_message_type<T>("merak." #T)
  MERAK_SVM_MESSAGE(svm_vector);
  MERAK_SVM_MESSAGE(svm_local);
  MERAK_SVM_MESSAGE(svm_dual);
  MERAK_SVM_MESSAGE(svm_rho);
  MERAK_SVM_MESSAGE(svm_stats);
  MERAK_SVM_MESSAGE(svm_setup);
  MERAK_SVM_MESSAGE(svm_eval);
  MERAK_SVM_MESSAGE(svm_select);
  MERAK_SVM_MESSAGE(svm_test);
  MERAK_SVM_MESSAGE(svm_done);
  MERAK_SVM_MESSAGE(svm_tick);
  MERAK_SVM_MESSAGE(svm_step_reply);
  MERAK_SVM_MESSAGE(svm_dual_reply);
  MERAK_SVM_MESSAGE(svm_stats_reply);
  MERAK_SVM_MESSAGE(svm_setup_reply);
  MERAK_SVM_MESSAGE(svm_select_reply);
  MERAK_SVM_MESSAGE(svm_margins_reply);
  MERAK_SVM_MESSAGE(svm_hello);
  MERAK_SVM_MESSAGE(svm_verdict);
  MERAK_SVM_MESSAGE(svm_joined);
  MERAK_SVM_MESSAGE(svm_refused);
#undef MERAK_SVM_MESSAGE
}

inline svm_vector to_vector(const Eigen::VectorXd& v) {
  return {std::vector<double>(v.data(), v.data() + v.size())};
}
inline Eigen::VectorXd to_eigen(const svm_vector& v) {
  return Eigen::Map<const Eigen::VectorXd>(v.v.data(), Eigen::Index(v.v.size()));
}
inline svm_vector pack(const svm::worker_residuals& r) {
  return {
      {r.primal_sq, r.r_change_sq, r.local_norm_sq, r.aux_norm_sq, r.dual_norm_sq, double(r.rows)}};
}
// False when `v` is not 6 numbers.
inline bool unpack(const svm_vector& v, svm::worker_residuals& r) {
  if (v.v.size() != 6) return false;
  r.primal_sq = v.v[0], r.r_change_sq = v.v[1], r.local_norm_sq = v.v[2], r.aux_norm_sq = v.v[3];
  r.dual_norm_sq = v.v[4], r.rows = int64_t(v.v[5]);
  return true;
}

}  // namespace merak::actors
