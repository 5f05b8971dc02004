// The consensus ADMM worker actor: one behaviour, no phases of its own; the
// consensus side drives it (actors/svm_consensus.cpp, actors/svm_remote.cpp).
#include "actors/svm_worker_actor.hpp"

#include "actors/svm_messages.hpp"
#include "core/error.hpp"
#include "svm/fit.hpp"
#include "svm/standardize.hpp"

namespace merak::actors {
namespace {

using svm_tick_atom = caf::atom_constant<caf::atom("svmtick")>;  // to self: idle check

struct svm_worker_state {
  int rank = 0;
  // Worker processes: the rows as read (the whole file when whole_file,
  // else this rank's rows only), kept for every fit of a cross-validation.
  svm::dataset source;
  bool whole_file = false;
  int world = 1;
  svm::dataset shard;  // the current fit's training rows, until svm_setup
  bool have_shard = false;
  svm::dataset test;  // the current fold's held-out rows of this rank
  std::unique_ptr<svm::consensus_worker> w;
  Eigen::VectorXd zeta;  // of the last dual step (a rho change reruns the local step with it)
  std::chrono::steady_clock::time_point last_message = std::chrono::steady_clock::now();
};

// Runs `f` and returns its reply, or (svm_fail, rank, what) when it throws.
template <class F>
caf::message guarded(svm_worker_state& s, const char* phase, bool needs_setup, F&& f) {
  s.last_message = std::chrono::steady_clock::now();
  try {
    if (needs_setup && !s.w) fail("'{}' before svm_setup", phase);
    caf::message reply = f();
    s.last_message = std::chrono::steady_clock::now();  // a long step is not idle time
    return reply;
  } catch (const std::exception& e) {
    return caf::make_message(svm_fail_atom::value, int32_t(s.rank), std::string(e.what()));
  }
}

std::vector<int64_t> pick(const std::vector<int64_t>& rows, const std::vector<int64_t>& at) {
  std::vector<int64_t> out;
  out.reserve(at.size());
  for (int64_t i : at) out.push_back(rows[size_t(i)]);
  return out;
}

// This rank's rows for the next fit: with folds == 0 its block of all rows
// (the shard of a plain fit); else its block of fold `fold`'s training rows
// and its block of the held-out rows (cross_validate's split, then
// consensus_shard_rows within each part: the shards of --workers K
// --folds F).
void select_rows(svm_worker_state& s, int folds, int fold) {
  // A presharded worker's rows go into the fits on them (scaled in place at
  // setup, so that such a worker holds its data once): it cannot select
  // again, so it serves one fit or a warm path without folds.
  if (!s.whole_file && folds != 0)
    fail(
        "--folds needs workers that read the whole data file; this one holds only its own "
        "rows (--presharded)");
  if (!s.whole_file)
    fail(
        "selecting rows again (svm path --cold, or a warm path's fit that must start cold) "
        "needs workers that read the whole data file; this one holds only its own rows "
        "(--presharded)");
  s.w.reset();
  const int64_t n = s.source.rows();
  if (folds == 0) {
    s.shard = s.source.select_rows(svm::consensus_shard_rows(n, s.world, s.rank));
    s.test = s.source.select_rows({});
  } else {
    std::vector<int64_t> train, test;
    svm::cv_split(n, folds, fold, train, test);
    s.shard = s.source.select_rows(
        pick(train, svm::consensus_shard_rows(int64_t(train.size()), s.world, s.rank)));
    s.test = s.source.select_rows(
        pick(test, svm::consensus_shard_rows(int64_t(test.size()), s.world, s.rank)));
  }
  s.have_shard = true;
}

caf::behavior svm_worker(caf::event_based_actor* self, std::shared_ptr<svm_worker_state> s,
                         caf::actor consensus, std::chrono::milliseconds idle) {
  if (consensus) {
    self->monitor(consensus);
    self->set_down_handler([self, consensus](caf::down_msg& dm) {
      if (dm.source == consensus.address())
        self->quit(caf::make_error(
            caf::sec::runtime_error,
            "the consensus side went away (" + self->system().render(dm.reason) + ")"));
    });
  }
  if (idle.count() > 0) self->delayed_send(self, idle / 4, svm_tick_atom::value);
  const int32_t k = s->rank;
  return {
      [s, k](svm_local_atom, const svm_vector& zeta) {
        return guarded(*s, "local", true, [&] {
          return caf::make_message(svm_local_atom::value, k,
                                   to_vector(s->w->local_step(to_eigen(zeta))));
        });
      },
      // The dual step, then at once the next iteration's local step against
      // the same zeta: one round trip per iteration instead of two.
      [s, k](svm_dual_atom, const svm_vector& zeta) {
        return guarded(*s, "dual", true, [&] {
          s->zeta = to_eigen(zeta);
          const svm_vector res = pack(s->w->dual_step(s->zeta));
          return caf::make_message(svm_dual_atom::value, k, res,
                                   to_vector(s->w->local_step(s->zeta)));
        });
      },
      // A rho change between iterations: the local step sent with the dual
      // step is void; rescale and redo it.
      [s, k](svm_rho_atom, double factor) {
        return guarded(*s, "rho", true, [&] {
          s->w->retract_local_step();
          s->w->scale_rho(factor);
          return caf::make_message(svm_rho_atom::value, k, to_vector(s->w->local_step(s->zeta)));
        });
      },
      [s, k](svm_select_atom, int32_t folds, int32_t fold) {
        return guarded(*s, "select", false, [&] {
          select_rows(*s, folds, fold);
          return caf::make_message(svm_select_atom::value, k, int64_t(s->shard.rows()),
                                   int64_t(s->test.rows()));
        });
      },
      [s, k](svm_stats_atom) {
        return guarded(*s, "stats", false, [&] {
          if (!s->have_shard) fail("'stats' after svm_setup without a new svm_select");
          const svm::column_stats st = svm::compute_column_stats(s->shard.x);
          svm_vector sums;
          sums.v.assign(st.sum.data(), st.sum.data() + st.sum.size());
          sums.v.insert(sums.v.end(), st.sq_sum.data(), st.sq_sum.data() + st.sq_sum.size());
          return caf::make_message(svm_stats_atom::value, k, int64_t(s->shard.rows()),
                                   int64_t(s->shard.cols()), std::move(sums));
        });
      },
      [s, k](svm_setup_atom, const svm_vector& scale, int64_t n_total, int64_t p, double rho1,
             double rho2, int32_t method, int64_t dense_limit) {
        return guarded(*s, "setup", false, [&] {
          if (s->w) fail("svm_setup sent twice");
          if (p < s->shard.cols() || int64_t(scale.v.size()) != p)
            fail("svm_setup for {} features ({} scales); this shard has {}", p, scale.v.size(),
                 s->shard.cols());
          s->shard.x.resize_cols(p);
          s->shard.x.scale_columns(to_eigen(scale));
          s->w = std::make_unique<svm::consensus_worker>(std::move(s->shard), n_total, rho1, rho2,
                                                         svm::w_method(method), dense_limit);
          s->shard = {};
          s->have_shard = false;
          return caf::make_message(svm_setup_atom::value, k);
        });
      },
      [s, k](svm_eval_atom, const svm_vector& w) {
        return guarded(*s, "eval", true, [&] {
          const svm::dataset& d = s->w->shard();
          if (int64_t(w.v.size()) != d.cols())
            fail("svm_eval with {} weights for {} features", w.v.size(), d.cols());
          Eigen::VectorXd xw;
          d.x.times(to_eigen(w), xw);
          return caf::make_message(svm_eval_atom::value, k, to_vector(xw), to_vector(d.y));
        });
      },
      // Held-out margins with the weights in the data's units (the held-out
      // rows are not scaled).
      [s, k](svm_test_atom, const svm_vector& w) {
        return guarded(*s, "test", false, [&] {
          const svm::dataset& d = s->test;
          if (int64_t(w.v.size()) < d.cols())
            fail("svm_test with {} weights for {} features", w.v.size(), d.cols());
          Eigen::VectorXd xw = Eigen::VectorXd::Zero(d.rows());
          if (d.rows() > 0) d.x.times(to_eigen(w).head(d.cols()), xw);
          return caf::make_message(svm_test_atom::value, k, to_vector(xw), to_vector(d.y));
        });
      },
      [self](svm_done_atom) { self->quit(); },
      [self, s, idle](svm_tick_atom) {
        if (std::chrono::steady_clock::now() - s->last_message > idle)
          self->quit(caf::make_error(
              caf::sec::runtime_error,
              fmt::format("no message from the consensus side for {} ms", idle.count())));
        else
          self->delayed_send(self, idle / 4, svm_tick_atom::value);
      },
  };
}

}  // namespace

caf::actor spawn_svm_worker(caf::actor_system& sys, int rank,
                            std::unique_ptr<svm::consensus_worker> w) {
  auto s = std::make_shared<svm_worker_state>();
  s->rank = rank;
  s->w = std::move(w);
  return sys.spawn(svm_worker, std::move(s), caf::actor{}, std::chrono::milliseconds(0));
}

caf::actor spawn_svm_shard_worker(caf::actor_system& sys, int rank, int world, svm::dataset data,
                                  bool whole_file, caf::actor consensus,
                                  std::chrono::milliseconds idle) {
  auto s = std::make_shared<svm_worker_state>();
  s->rank = rank;
  s->world = world;
  s->whole_file = whole_file;
  if (whole_file) {
    s->source = std::move(data);
    select_rows(*s, 0, 0);
  } else {
    s->shard = std::move(data);  // --presharded: fits on these rows only
    s->have_shard = true;
  }
  return sys.spawn(svm_worker, std::move(s), std::move(consensus), idle);
}

}  // namespace merak::actors
