// The consensus ADMM worker actor: one behaviour, no phases of its own; the
// consensus side drives it (actors/svm_consensus.cpp, actors/svm_remote.cpp).
#include "actors/svm_worker_actor.hpp"

#include "actors/svm_messages.hpp"
#include "core/error.hpp"
#include "svm/fit.hpp"
#include "svm/standardize.hpp"

namespace merak::actors {
namespace {

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

// Runs `f` and returns its reply from this worker, or an empty one that
// says what failed when it throws.
template <class Reply, class F>
Reply guarded(svm_worker_state& s, const char* phase, bool needs_setup, F&& f) {
  s.last_message = std::chrono::steady_clock::now();
  Reply reply;
  try {
    if (needs_setup && !s.w) fail("'{}' before svm_setup", phase);
    reply = f();
    s.last_message = std::chrono::steady_clock::now();  // a long step is not idle time
  } catch (const std::exception& e) {
    reply = Reply{};
    reply.from.error = e.what();
  }
  reply.from.rank = int32_t(s.rank);
  return reply;
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

svm_worker_api::behavior_type svm_worker(svm_worker_api::pointer self,
                                         std::shared_ptr<svm_worker_state> s, caf::actor consensus,
                                         std::chrono::milliseconds idle) {
  if (consensus) {
    self->monitor(consensus);
    self->set_down_handler([self, consensus](caf::down_msg& dm) {
      if (dm.source == consensus.address())
        self->quit(caf::make_error(
            caf::sec::runtime_error,
            "the consensus side went away (" + self->system().render(dm.reason) + ")"));
    });
  }
  if (idle.count() > 0) self->delayed_send(self, idle / 4, svm_tick{});
  return {
      [s](const svm_local& m) {
        return guarded<svm_step_reply>(*s, "local", true, [&] {
          return svm_step_reply{{}, to_vector(s->w->local_step(to_eigen(m.zeta)))};
        });
      },
      // The dual step, then at once the next iteration's local step against
      // the same zeta: one round trip per iteration instead of two.
      [s](const svm_dual& m) {
        return guarded<svm_dual_reply>(*s, "dual", true, [&] {
          s->zeta = to_eigen(m.zeta);
          svm_vector res = pack(s->w->dual_step(s->zeta));
          return svm_dual_reply{{}, std::move(res), to_vector(s->w->local_step(s->zeta))};
        });
      },
      // A rho change between iterations: the local step sent with the dual
      // step is void; rescale and redo it.
      [s](const svm_rho& m) {
        return guarded<svm_step_reply>(*s, "rho", true, [&] {
          s->w->retract_local_step();
          s->w->scale_rho(m.factor);
          return svm_step_reply{{}, to_vector(s->w->local_step(s->zeta))};
        });
      },
      [s](const svm_select& m) {
        return guarded<svm_select_reply>(*s, "select", false, [&] {
          select_rows(*s, m.folds, m.fold);
          return svm_select_reply{{}, int64_t(s->shard.rows()), int64_t(s->test.rows())};
        });
      },
      [s](const svm_stats&) {
        return guarded<svm_stats_reply>(*s, "stats", false, [&] {
          if (!s->have_shard) fail("'stats' after svm_setup without a new svm_select");
          const svm::column_stats st = svm::compute_column_stats(s->shard.x);
          svm_vector sums;
          sums.v.assign(st.sum.data(), st.sum.data() + st.sum.size());
          sums.v.insert(sums.v.end(), st.sq_sum.data(), st.sq_sum.data() + st.sq_sum.size());
          return svm_stats_reply{
              {}, int64_t(s->shard.rows()), int64_t(s->shard.cols()), std::move(sums)};
        });
      },
      [s](const svm_setup& m) {
        return guarded<svm_setup_reply>(*s, "setup", false, [&] {
          const auto& scale = m.scale;
          const int64_t p = m.p;
          if (s->w) fail("svm_setup sent twice");
          if (p < s->shard.cols() || int64_t(scale.v.size()) != p)
            fail("svm_setup for {} features ({} scales); this shard has {}", p, scale.v.size(),
                 s->shard.cols());
          s->shard.x.resize_cols(p);
          s->shard.x.scale_columns(to_eigen(scale));
          s->w = std::make_unique<svm::consensus_worker>(std::move(s->shard), m.n_total, m.rho1,
                                                         m.rho2, svm::w_method(m.method),
                                                         m.dense_limit);
          s->shard = {};
          s->have_shard = false;
          return svm_setup_reply{};
        });
      },
      [s](const svm_eval& m) {
        return guarded<svm_margins_reply>(*s, "eval", true, [&] {
          const auto& w = m.w;
          const svm::dataset& d = s->w->shard();
          if (int64_t(w.v.size()) != d.cols())
            fail("svm_eval with {} weights for {} features", w.v.size(), d.cols());
          Eigen::VectorXd xw;
          d.x.times(to_eigen(w), xw);
          return svm_margins_reply{{}, to_vector(xw), to_vector(d.y)};
        });
      },
      // Held-out margins with the weights in the data's units (the held-out
      // rows are not scaled).
      [s](const svm_test& m) {
        return guarded<svm_margins_reply>(*s, "test", false, [&] {
          const auto& w = m.w;
          const svm::dataset& d = s->test;
          if (int64_t(w.v.size()) < d.cols())
            fail("svm_test with {} weights for {} features", w.v.size(), d.cols());
          Eigen::VectorXd xw = Eigen::VectorXd::Zero(d.rows());
          if (d.rows() > 0) d.x.times(to_eigen(w).head(d.cols()), xw);
          return svm_margins_reply{{}, to_vector(xw), to_vector(d.y)};
        });
      },
      [self](svm_done) { self->quit(); },
      [self, s, idle](svm_tick) {
        if (std::chrono::steady_clock::now() - s->last_message > idle)
          self->quit(caf::make_error(
              caf::sec::runtime_error,
              fmt::format("no message from the consensus side for {} ms", idle.count())));
        else
          self->delayed_send(self, idle / 4, svm_tick{});
      },
  };
}

}  // namespace

svm_worker_api spawn_svm_worker(caf::actor_system& sys, int rank,
                                std::unique_ptr<svm::consensus_worker> w) {
  auto s = std::make_shared<svm_worker_state>();
  s->rank = rank;
  s->w = std::move(w);
  return sys.spawn(svm_worker, std::move(s), caf::actor{}, std::chrono::milliseconds(0));
}

svm_worker_api spawn_svm_shard_worker(caf::actor_system& sys, int rank, int world,
                                      svm::dataset data, bool whole_file, caf::actor consensus,
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
