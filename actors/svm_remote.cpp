// Consensus ADMM across processes: the consensus side (join, stats, setup,
// the shared iterations, eval, done) and the worker process.
//
//   consensus side:  gate + publish rendezvous --> join (hello, per rank)
//        --> stats --> setup --> iterations (drive_consensus) --> eval --> done
//   worker process:  connect --> hello --> [verdict "" ?] --> serve until done
#include "actors/svm_remote.hpp"

#include <spdlog/spdlog.h>
#include <caf/all.hpp>
#include <caf/io/all.hpp>

#include <memory>
#include <optional>
#include <thread>

#include "actors/svm_messages.hpp"
#include "actors/svm_phase.hpp"
#include "actors/svm_worker_actor.hpp"
#include "job/gate.hpp"
#include "core/error.hpp"
#include "svm/objective.hpp"
#include "svm/standardize.hpp"

namespace merak::actors {
namespace {

using clock_type = std::chrono::steady_clock;

// The published actor: checks each hello (its sender passed the gate) and
// tells the consensus side who joined. Holds no data; only the world size
// and the ranks taken.
svm_rendezvous_api::behavior_type svm_rendezvous(svm_rendezvous_api::pointer self, int world,
                                                 svm_consensus_api consensus) {
  auto taken = std::make_shared<std::vector<bool>>(size_t(world), false);
  return {
      [=](const svm_hello& h) -> svm_verdict {
        const int32_t rank = h.rank, w = h.world;
        std::string why;
        if (w != world)
          why = fmt::format("it was started for {} workers, the consensus side runs {}", w, world);
        else if (rank < 0 || rank >= world)
          why = fmt::format("rank {} is out of range for {} workers", rank, world);
        else if ((*taken)[size_t(rank)])
          why = fmt::format("rank {} has already joined", rank);
        else if (!h.worker)
          why = "its hello carries no worker actor";
        if (!why.empty()) {
          self->send(consensus, svm_refused{fmt::format("rank {}: {}", rank, why)});
          return {why};
        }
        (*taken)[size_t(rank)] = true;
        self->send(consensus, svm_joined{rank, h.worker});
        return {};
      },
  };
}

void configure(caf::actor_system_config& cfg) {
  add_svm_message_types(cfg);
  cfg.load<caf::io::middleman>();
  // Round trips over loopback are shorter than with the work-stealing
  // default, whose polling workers take the cores the solvers need
  // (docs/results/distributed-runtime.md, "Transport choices").
  cfg.set("scheduler.policy", caf::atom("sharing"));
  cfg.set("logger.console", caf::atom("none"));
}

std::string rank_list(const std::vector<svm_worker_api>& ws) {
  std::string s;
  for (size_t k = 0; k < ws.size(); ++k)
    if (!ws[k]) s += (s.empty() ? "" : ", ") + std::to_string(k);
  return s;
}

}  // namespace

svm_remote_result consensus_fit_remote(int workers, const svm::penalty& pen,
                                       const svm_remote_options& o) {
  return consensus_path_remote(workers, {pen}, o).front();
}

std::vector<svm_remote_result> consensus_path_remote(
    int workers, const std::vector<svm::penalty>& pens, const svm_remote_options& o,
    const std::function<void(size_t, const svm_remote_result&)>& on_point) {
  if (workers < 1) fail("--procs must be at least 1 (got {})", workers);
  if (o.token.empty()) fail("no job token for the svm workers");
  if (pens.empty()) fail("no lambda to fit");
  for (const auto& pen : pens) pen.validate();
  if (!o.full_fit && o.folds < 2) fail("--cv-only needs --folds F (F >= 2)");
  if (o.admm.max_iter < 1) fail("--max-iter must be at least 1 (got {})", o.admm.max_iter);
  const job::job_credentials creds{o.token, job::make_tls(o.tls)};
  // The gate outlives the actor system, whose sockets close first, so the
  // last messages (svm_done) reach the workers.
  std::optional<job::gate_server> gate;
  caf::actor_system_config cfg;
  configure(cfg);
  caf::actor_system sys{cfg};
  caf::scoped_actor self{sys};
  const size_t K = size_t(workers);
  std::vector<svm_worker_api> ws(K);
  auto rendezvous = sys.spawn(svm_rendezvous, workers, caf::actor_cast<svm_consensus_api>(self));
  // On every way out: stop the rendezvous (the actor system waits for it)
  // and the workers (a worker process then exits).
  bool done = false;
  auto stop = [&] {
    for (auto& w : ws)
      if (w) {
        if (done)
          self->send(w, svm_done{});
        else
          self->send_exit(w, caf::exit_reason::user_shutdown);
      }
    self->send_exit(rendezvous, caf::exit_reason::user_shutdown);
  };
  std::unique_ptr<decltype(stop), void (*)(decltype(stop)*)> stopper(
      &stop, [](decltype(stop)* f) { (*f)(); });

  // CAF listens on loopback only; the network reaches it through the gate.
  auto caf_port = sys.middleman().publish(rendezvous, 0, "127.0.0.1", true);
  if (!caf_port)
    fail("svm consensus side: cannot listen on loopback: {}", sys.render(caf_port.error()));
  gate.emplace(o.host, o.port, *caf_port, creds, "svm", "svm consensus side");
  const uint16_t port = static_cast<uint16_t>(gate->port());
  const auto t_listen = clock_type::now();
  if (o.on_listening) o.on_listening(port);
  auto refusals = [&](std::string refused) {
    for (auto& r : gate->refusals()) refused += (refused.empty() ? "" : "; ") + r;
    return refused.empty() ? std::string() : " (refused: " + refused + ")";
  };

  // Join: every rank says hello with its rank (checked by the rendezvous).
  std::string refused;
  size_t joined = 0;
  const auto join_deadline = t_listen + o.timeout;
  while (joined < K) {
    if (o.abort_check)
      if (std::string why = o.abort_check(); !why.empty())
        fail("svm worker processes ended before all {} joined ({} missing: {}): {}", K, K - joined,
             rank_list(ws), why);
    const auto now = clock_type::now();
    if (now >= join_deadline)
      fail("svm worker{} {} did not join the consensus side at {}:{} within {} ms{}",
           K - joined > 1 ? "s" : "", rank_list(ws), o.host, port, o.timeout.count(),
           refusals(refused));
    self->receive(
        [&](svm_joined& j) {
          ws[size_t(j.rank)] = std::move(j.worker);
          self->monitor(ws[size_t(j.rank)]);
          ++joined;
        },
        [&](svm_refused& r) {
          spdlog::warn("svm consensus side: refused a worker: {}", r.why);
          refused += (refused.empty() ? "" : "; ") + r.why;
        },
        [&](caf::down_msg& dm) {
          fail("svm worker {} went down before the fit started ({})",
               detail::svm_rank_of(ws, dm.source), sys.render(dm.reason));
        },
        caf::after(
            std::min<clock_type::duration>(std::chrono::milliseconds(200), join_deadline - now)) >>
            [] {});
  }
  std::vector<svm_remote_result> outs(pens.size());
  const double join_s = std::chrono::duration<double>(clock_type::now() - t_listen).count();
  for (auto& out : outs) out.join_s = join_s;

  // The consensus settings, with `automatic` resolved on the whole data
  // set (all rows, held out ones included) when the first rows are
  // prepared: every fit of the path, folds included, uses one method.
  svm::consensus_options admm = o.admm;
  bool resolved = false;
  int64_t held_out_rows = 0;  // by the workers' last selection
  // The rows the workers hold now (after svm_select, if any), set up for
  // consensus fits: their counts, the column scaling, and where the next fit
  // starts (the rhos the workers factored for, no zeta; after a fit, where
  // it ended).
  struct prepared {
    std::vector<int64_t> rows;
    int64_t n = 0, p = 0;
    Eigen::VectorXd scale;
    svm::consensus_carry carry;
  };
  // Stats and setup: fills `prep` for `pen`'s default rhos.
  auto prepare = [&](const svm::penalty& pen, prepared& prep) {
    // Stats: rows, features and column sums of every shard.
    std::vector<int64_t> rows(K), cols(K);
    std::vector<svm_vector> sums(K);
    detail::svm_phase<svm_stats_reply>(
        sys, self, ws, o.timeout, "stats", 0,
        [&](int k, svm_stats_reply& r) {
          const int64_t n_k = r.rows, p_k = r.cols;
          svm_vector& s = r.sums;
          if (n_k < 1)
            fail("svm worker {} holds no rows (its data has fewer samples than {} workers?)", k, K);
          if (p_k < 0 || int64_t(s.v.size()) != 2 * p_k)
            fail("svm worker {} sent {} column sums for {} features", k, s.v.size(), p_k);
          rows[size_t(k)] = n_k, cols[size_t(k)] = p_k, sums[size_t(k)] = std::move(s);
        },
        svm_stats{});
    int64_t n = 0, p = 0;
    for (size_t k = 0; k < K; ++k) n += rows[k], p = std::max(p, cols[k]);
    prep.rows = rows, prep.n = n, prep.p = p, prep.carry = {};
    svm::column_stats all;
    all.n = n;
    all.sum = Eigen::VectorXd::Zero(p), all.sq_sum = Eigen::VectorXd::Zero(p);
    for (size_t k = 0; k < K; ++k) {
      const Eigen::Index pk = Eigen::Index(cols[k]);
      all.sum.head(pk) += Eigen::Map<const Eigen::VectorXd>(sums[k].v.data(), pk);
      all.sq_sum.head(pk) += Eigen::Map<const Eigen::VectorXd>(sums[k].v.data() + pk, pk);
    }
    prep.scale = o.standardize ? svm::scaling_from_stats(all) : Eigen::VectorXd::Ones(p);

    if (!resolved) {
      admm.nonconvex = svm::resolve_nonconvex(o.admm.nonconvex, n + held_out_rows, p, pen.kind);
      resolved = true;
    }
    // Setup: each worker scales its rows and factors its system.
    svm::consensus_rhos(n, p, workers, pen, admm, prep.carry.rho1, prep.carry.rho2);
    detail::svm_phase<svm_setup_reply>(
        sys, self, ws, o.timeout, "setup", 0, [](int, svm_setup_reply&) {},
        svm_setup{to_vector(prep.scale), n, p, prep.carry.rho1, prep.carry.rho2,
                  int32_t(o.admm.method), o.admm.dense_limit});
  };
  // The margins X_k w of every shard and the labels, over all the rows the
  // workers hold (in rank order).
  auto evaluate = [&](const prepared& prep, const Eigen::VectorXd& w, Eigen::VectorXd& xw,
                      Eigen::VectorXd& y) {
    const std::vector<int64_t>& rows = prep.rows;
    xw.resize(prep.n), y.resize(prep.n);
    std::vector<int64_t> offset(K + 1, 0);
    for (size_t k = 0; k < K; ++k) offset[k + 1] = offset[k] + rows[k];
    detail::svm_phase<svm_margins_reply>(
        sys, self, ws, o.timeout, "eval", 0,
        [&](int k, svm_margins_reply& r) {
          const svm_vector &m = r.margins, &yk = r.labels;
          const int64_t n_k = rows[size_t(k)];
          if (int64_t(m.v.size()) != n_k || int64_t(yk.v.size()) != n_k)
            fail("svm worker {} sent {} margins and {} labels for its {} rows", k, m.v.size(),
                 yk.v.size(), n_k);
          xw.segment(offset[size_t(k)], n_k) = to_eigen(m);
          y.segment(offset[size_t(k)], n_k) = to_eigen(yk);
        },
        svm_eval{to_vector(w)});
  };
  // One fit of `pen` on prepared rows (svm::consensus_solve: one run, or
  // LLA's weighted-L1 runs) from prep's carry (with a zeta when the workers
  // kept their state from a fit), which it moves on. Each run ends with
  // eval: the margins give the polished bias and F. Fills `fit`, `scale`,
  // samples, features and accuracy of `r`. t0: when this fit's time starts.
  auto iterate = [&](const svm::penalty& pen, prepared& prep, svm_remote_result& r,
                     clock_type::time_point t0) {
    const int64_t n = prep.n, p = prep.p;
    r.samples = n, r.features = p, r.scale = prep.scale;
    r.lla = svm::uses_lla(pen, admm.nonconvex, n, p);
    svm_actor_options ao;
    ao.admm = admm;
    ao.timeout = o.timeout;
    Eigen::VectorXd xw, y, last_w;  // the last run's margins, labels and w
    double last_b = 0;
    const svm::consensus_run run = [&](const svm::penalty& rpen, const Eigen::VectorXd* weights,
                                       svm::consensus_carry& carry, svm::consensus_result& res) {
      svm::consensus_reducer red(p, n, workers, rpen, carry, admm);
      if (weights) red.set_l1_weights(*weights);
      detail::drive_consensus(sys, self, ws, p, red, ao, res);
      carry = red.carry();
      res.rho1 = red.rho1(), res.rho2 = red.rho2();
      res.w = red.zeta().head(p);
      res.b = red.zeta()[p];
      evaluate(prep, res.w, xw, y);
      if (admm.polish_bias) res.b = svm::best_bias(y, xw, res.b);
      res.objective = svm::mean_hinge(y, xw.array() + res.b) + pen.value(res.w);
      last_w = res.w, last_b = res.b;
    };
    r.fit = svm::consensus_solve(n, p, pen, admm, prep.carry, run);
    // The training accuracy of the fit kept: from the last run's margins
    // when it is that run (always for a direct fit), else evaluated again
    // (LLA: a step that was not kept ran last).
    if (r.fit.b != last_b || !(r.fit.w.array() == last_w.array()).all())
      evaluate(prep, r.fit.w, xw, y);
    const Eigen::VectorXd margin = xw.array() + r.fit.b;
    r.accuracy =
        double(((margin.array() >= 0).cast<double>() * 2 - 1 == y.array()).count()) / double(n);
    r.fit.time_s = std::chrono::duration<double>(clock_type::now() - t0).count();
  };
  // A cold fit: stats, setup, iterations, eval.
  auto fit_once = [&](const svm::penalty& pen, svm_remote_result& r) {
    const auto t0 = clock_type::now();
    prepared prep;
    prepare(pen, prep);
    iterate(pen, prep, r, t0);
  };
  // Whether a fit at `pen` may continue from `prep` (the previous fit on
  // the same rows): with the direct prox the workers' rho1 must stay above
  // its threshold for K rho1 (the nonconvex penalties'; it does along a
  // decreasing lambda grid with theta fixed); LLA's runs are L1.
  auto can_continue = [&](const svm::penalty& pen, const prepared& prep) {
    const bool lla = svm::uses_lla(pen, admm.nonconvex, prep.n, prep.p);  // L1 runs: no threshold
    return prep.carry.zeta.size() != 0 &&
           (lla || double(workers) * prep.carry.rho1 > pen.rho_threshold());
  };

  if (o.folds != 0 && o.folds < 2) fail("--folds must be at least 2 (got {})", o.folds);
  // The workers select fold f's training and held-out rows (folds 0: their
  // block of all rows); returns each worker's held-out row count. A worker
  // takes each selection's rows anew (its protocol: select, stats, setup,
  // fits), so a fit after a selection needs `prepare` first.
  auto select = [&](int folds, int f) {
    std::vector<int64_t> test_rows(K);
    detail::svm_phase<svm_select_reply>(
        sys, self, ws, o.timeout, "select", 0,
        [&](int k, svm_select_reply& r) { test_rows[size_t(k)] = r.test_rows; },
        svm_select{int32_t(folds), int32_t(f)});
    held_out_rows = 0;
    for (int64_t t : test_rows) held_out_rows += t;
    return test_rows;
  };
  // Held-out predictions of fit r on fold f (weights in the data's units,
  // +1 when x^T w + b >= 0), added to penalty i's CV fields; t0: when the
  // fold fit's time started.
  std::vector<int64_t> right(pens.size(), 0), held_out(pens.size(), 0);
  auto score_fold = [&](size_t i, int f, const svm_remote_result& r,
                        const std::vector<int64_t>& test_rows, clock_type::time_point t0) {
    svm_remote_result& out = outs[i];
    out.lla = r.lla;
    const Eigen::VectorXd w = r.fit.w.cwiseProduct(r.scale);
    int64_t fold_right = 0, fold_n = 0;
    detail::svm_phase<svm_margins_reply>(
        sys, self, ws, o.timeout, "test", 0,
        [&](int k, svm_margins_reply& held) {
          const svm_vector &m = held.margins, &yk = held.labels;
          if (int64_t(m.v.size()) != test_rows[size_t(k)] || yk.v.size() != m.v.size())
            fail("svm worker {} sent {} held-out margins and {} labels for its {} held-out rows", k,
                 m.v.size(), yk.v.size(), test_rows[size_t(k)]);
          for (size_t j = 0; j < m.v.size(); ++j)
            fold_right += ((m.v[j] + r.fit.b >= 0) ? 1.0 : -1.0) == yk.v[j];
          fold_n += int64_t(m.v.size());
        },
        svm_test{to_vector(w)});
    if (fold_n < 1) fail("fold {} of {} holds out no samples", f, o.folds);
    right[i] += fold_right, held_out[i] += fold_n;
    out.fold_accuracy.push_back(double(fold_right) / double(fold_n));
    out.cv_mean_nnz += double((w.array() != 0).count()) / o.folds;
    out.cv_mean_iterations += double(r.fit.iterations) / o.folds;
    out.cv_time_s += std::chrono::duration<double>(clock_type::now() - t0).count();
    if (int(out.fold_accuracy.size()) == o.folds)
      out.cv_accuracy = double(right[i]) / double(held_out[i]);
  };
  // Runs fn for penalty i; with more than one penalty an error names lambda.
  auto named = [&](size_t i, const std::function<void()>& fn) {
    if (pens.size() == 1) return fn();
    try {
      fn();
    } catch (const std::exception& e) {
      fail("lambda {}: {}", pens[i].lambda, e.what());
    }
  };

  if (!o.warm) {
    // Cold: one penalty after the other, each finished (its folds, then its
    // fit on all rows) and handed to on_point before the next.
    for (size_t i = 0; i < pens.size(); ++i) {
      named(i, [&] {
        for (int f = 0; f < o.folds; ++f) {
          const auto t0 = clock_type::now();
          const std::vector<int64_t> test_rows = select(o.folds, f);
          svm_remote_result r;
          fit_once(pens[i], r);
          score_fold(i, f, r, test_rows, t0);
        }
        if (o.full_fit) {
          // Every worker's block of all rows (after folds, or after a fit).
          if (o.folds != 0 || i > 0) select(0, 0);
          fit_once(pens[i], outs[i]);
        }
      });
      if (on_point) on_point(i, outs[i]);
    }
  } else {
    // Warm (as svm::fit_path): each row selection (every fold's training
    // rows, then all rows) walks the whole grid, each fit continuing from
    // the last one's state: the consensus side's zeta and rhos, the
    // workers' theta, r and duals (they keep them between fits on the same
    // rows). A fit whose prox needs a larger rho than the last one ended
    // with starts cold (a new selection and setup). Points are handed to
    // on_point during the walk over all rows (with --cv-only, after the
    // folds).
    // The workers join holding their block of all rows, not yet set up: a
    // walk over all rows first (no folds) needs no selection, so a warm
    // path also runs on presharded workers (which refuse a selection) as
    // long as no fit has to start cold.
    bool joined_rows = true;
    // A walk over all rows (folds 0) fills outs[i] and hands it to on_point.
    auto walk = [&](int folds, int f) {
      std::vector<int64_t> test_rows(K, 0);
      if (folds != 0 || !joined_rows) test_rows = select(folds, f);
      joined_rows = false;
      prepared prep;
      bool fresh = true;  // the workers hold a selection not yet set up
      for (size_t i = 0; i < pens.size(); ++i) {
        named(i, [&] {
          const auto t0 = clock_type::now();
          if (!can_continue(pens[i], prep)) {
            if (!fresh) test_rows = select(folds, f);
            prepare(pens[i], prep);
            fresh = false;
          }
          svm_remote_result fold_fit;
          svm_remote_result& r = folds != 0 ? fold_fit : outs[i];
          iterate(pens[i], prep, r, t0);
          if (folds != 0)
            score_fold(i, f, r, test_rows, t0);
          else if (on_point)
            on_point(i, r);
        });
      }
    };
    for (int f = 0; f < o.folds; ++f) walk(o.folds, f);
    if (o.full_fit) {
      walk(0, 0);
    } else if (on_point) {
      for (size_t i = 0; i < pens.size(); ++i) on_point(i, outs[i]);
    }
  }
  done = true;
  return outs;
}

void run_svm_worker_process(svm::dataset data, const svm_worker_process_options& o) {
  if (o.world < 1 || o.rank < 0 || o.rank >= o.world)
    fail("svm worker: --rank {} is out of range for --world {}", o.rank, o.world);
  if (o.token.empty())
    fail("svm worker {}: no job token (pass --token or set MERAK_JOB_TOKEN)", o.rank);
  // Through the gate: both sides prove the token, then CAF connects over
  // the tunnel. The tunnel outlives the actor system (its sockets close
  // first).
  const std::string where = fmt::format("the consensus side at {}:{}", o.host, o.port);
  std::optional<job::gate_tunnel> tunnel;
  tunnel.emplace(o.host, o.port, job::job_credentials{o.token, job::make_tls(o.tls)}, "svm",
                 o.timeout, fmt::format("svm worker {}", o.rank), where);
  caf::actor_system_config cfg;
  configure(cfg);
  caf::actor_system sys{cfg};
  auto x =
      sys.middleman().remote_actor<svm_rendezvous_api>("127.0.0.1", uint16_t(tunnel->local_port()));
  if (!x) fail("svm worker {}: cannot reach {}: {}", o.rank, where, sys.render(x.error()));
  svm_rendezvous_api consensus = std::move(*x);
  const auto idle = o.idle.count() > 0 ? o.idle : 2 * o.timeout;
  svm_worker_api worker =
      spawn_svm_shard_worker(sys, o.rank, o.world, std::move(data), o.whole_file,
                             caf::actor_cast<caf::actor>(consensus), idle);
  caf::scoped_actor self{sys};
  self->monitor(worker);
  std::string verdict, error;
  bool answered = false;
  self->request(consensus, o.timeout, svm_hello{int32_t(o.rank), int32_t(o.world), worker})
      .receive(
          [&](svm_verdict& v) {
            verdict = std::move(v.why);
            answered = true;
          },
          [&](caf::error& e) { error = sys.render(e); });
  if (!answered || !verdict.empty()) {
    self->send_exit(worker, caf::exit_reason::user_shutdown);
    if (!answered)
      fail("svm worker {}: no answer to its hello from the consensus side at {}:{}: {}", o.rank,
           o.host, o.port, error);
    fail("svm worker {}: the consensus side at {}:{} refused it: {}", o.rank, o.host, o.port,
         verdict);
  }
  caf::error reason;
  self->receive([&](caf::down_msg& dm) { reason = dm.reason; });
  if (reason == caf::exit_reason::user_shutdown)
    fail(
        "svm worker {}: the consensus side stopped the fit before it finished (its own error "
        "says why)",
        o.rank);
  if (reason && reason != caf::exit_reason::normal)
    fail("svm worker {}: {}", o.rank, sys.render(reason));
}

}  // namespace merak::actors
