#include "actors/svm_remote_backend.hpp"

#include <spdlog/spdlog.h>
#include <caf/io/all.hpp>

#include <algorithm>
#include <memory>

#include "actors/svm_phase.hpp"
#include "core/error.hpp"
#include "svm/objective.hpp"
#include "svm/standardize.hpp"

namespace merak::actors {
namespace {

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

// The ranks in `handles` that have not joined, as "0, 2".
std::string missing_ranks(const std::vector<svm_worker_api>& handles) {
  std::string s;
  for (size_t k = 0; k < handles.size(); ++k)
    if (!handles[k]) s += (s.empty() ? "" : ", ") + std::to_string(k);
  return s;
}

}  // namespace

caf::actor_system_config& configure_svm_remote(caf::actor_system_config& config) {
  add_svm_message_types(config);
  config.load<caf::io::middleman>();
  // Round trips over loopback are shorter than with the work-stealing
  // default, whose polling workers take the cores the solvers need
  // (docs/results/distributed-runtime.md, "Transport choices").
  config.set("scheduler.policy", caf::atom("sharing"));
  config.set("logger.console", caf::atom("none"));
  return config;
}

svm_remote_backend::svm_remote_backend(int workers, const svm_remote_options& options)
    : workers_(workers),
      options_(options),
      system_(configure_svm_remote(config_)),
      self_(system_),
      worker_handles_(size_t(workers)),
      consensus_(options.admm),
      held_out_rows_(size_t(workers), 0) {
  const job::job_credentials credentials{options_.token, job::make_tls(options_.tls)};
  rendezvous_ = system_.spawn(svm_rendezvous, workers_, caf::actor_cast<svm_consensus_api>(self_));
  // CAF listens on loopback only; the network reaches it through the gate.
  auto caf_port = system_.middleman().publish(rendezvous_, 0, "127.0.0.1", true);
  if (!caf_port)
    fail("svm consensus side: cannot listen on loopback: {}", system_.render(caf_port.error()));
  gate_.emplace(options_.host, options_.port, *caf_port, credentials, "svm", "svm consensus side");
  join_workers();
}

svm_remote_backend::~svm_remote_backend() = default;

void svm_remote_backend::stop_everyone() {
  for (auto& worker : worker_handles_)
    if (worker) {
      if (finished_)
        self_->send(worker, svm_done{});
      else
        self_->send_exit(worker, caf::exit_reason::user_shutdown);
    }
  // The actor system waits for the rendezvous: it must stop too.
  if (rendezvous_) self_->send_exit(rendezvous_, caf::exit_reason::user_shutdown);
}

std::string svm_remote_backend::refusals(std::string refused) const {
  for (auto& r : gate_->refusals()) refused += (refused.empty() ? "" : "; ") + r;
  return refused.empty() ? std::string() : " (refused: " + refused + ")";
}

// Join: every rank says hello with its rank (checked by the rendezvous).
void svm_remote_backend::join_workers() {
  const uint16_t port = static_cast<uint16_t>(gate_->port());
  const auto listening_since = clock_type::now();
  if (options_.on_listening) options_.on_listening(port);
  const size_t expected = size_t(workers_);
  std::string refused;
  size_t joined = 0;
  const auto deadline = listening_since + options_.timeout;
  while (joined < expected) {
    if (options_.abort_check)
      if (std::string why = options_.abort_check(); !why.empty())
        fail("svm worker processes ended before all {} joined ({} missing: {}): {}", expected,
             expected - joined, missing_ranks(worker_handles_), why);
    const auto now = clock_type::now();
    if (now >= deadline)
      fail("svm worker{} {} did not join the consensus side at {}:{} within {} ms{}",
           expected - joined > 1 ? "s" : "", missing_ranks(worker_handles_), options_.host, port,
           options_.timeout.count(), refusals(refused));
    self_->receive(
        [&](svm_joined& j) {
          worker_handles_[size_t(j.rank)] = std::move(j.worker);
          self_->monitor(worker_handles_[size_t(j.rank)]);
          ++joined;
        },
        [&](svm_refused& r) {
          spdlog::warn("svm consensus side: refused a worker: {}", r.why);
          refused += (refused.empty() ? "" : "; ") + r.why;
        },
        [&](caf::down_msg& dm) {
          fail("svm worker {} went down before the fit started ({})",
               detail::svm_rank_of(worker_handles_, dm.source), system_.render(dm.reason));
        },
        caf::after(
            std::min<clock_type::duration>(std::chrono::milliseconds(200), deadline - now)) >>
            [] {});
  }
  join_seconds_ = std::chrono::duration<double>(clock_type::now() - listening_since).count();
}

// The workers select fold `fold`'s training and held-out rows (folds 0:
// their block of all rows) and report their held-out row counts.
void svm_remote_backend::select_phase(int folds, int fold) {
  detail::svm_phase<svm_select_reply>(
      system_, self_, worker_handles_, options_.timeout, "select", 0,
      [&](int k, svm_select_reply& r) { held_out_rows_[size_t(k)] = r.test_rows; },
      svm_select{int32_t(folds), int32_t(fold)});
  held_out_total_ = 0;
  for (int64_t t : held_out_rows_) held_out_total_ += t;
  selected_folds_ = folds, selected_fold_ = fold;
  rows_set_up_ = false;
}

void svm_remote_backend::select_rows(int folds, int fold) {
  if (folds != selected_folds_ || fold != selected_fold_ || rows_set_up_) select_phase(folds, fold);
  prepared_ = {};
}

// Stats and setup: fills prepared_ for `pen`'s default rhos.
void svm_remote_backend::prepare(const svm::penalty& pen) {
  // Stats: rows, features and column sums of every shard.
  const size_t shards = size_t(workers_);
  std::vector<int64_t> rows(shards), cols(shards);
  std::vector<svm_vector> sums(shards);
  detail::svm_phase<svm_stats_reply>(
      system_, self_, worker_handles_, options_.timeout, "stats", 0,
      [&](int k, svm_stats_reply& r) {
        const int64_t n_k = r.rows, p_k = r.cols;
        svm_vector& s = r.sums;
        if (n_k < 1)
          fail("svm worker {} holds no rows (its data has fewer samples than {} workers?)", k,
               shards);
        if (p_k < 0 || int64_t(s.v.size()) != 2 * p_k)
          fail("svm worker {} sent {} column sums for {} features", k, s.v.size(), p_k);
        rows[size_t(k)] = n_k, cols[size_t(k)] = p_k, sums[size_t(k)] = std::move(s);
      },
      svm_stats{});
  int64_t n = 0, p = 0;
  for (size_t k = 0; k < shards; ++k) n += rows[k], p = std::max(p, cols[k]);
  prepared_.rows = rows, prepared_.n = n, prepared_.p = p, prepared_.carry = {};
  svm::column_stats all;
  all.n = n;
  all.sum = Eigen::VectorXd::Zero(p), all.sq_sum = Eigen::VectorXd::Zero(p);
  for (size_t k = 0; k < shards; ++k) {
    const Eigen::Index pk = Eigen::Index(cols[k]);
    all.sum.head(pk) += Eigen::Map<const Eigen::VectorXd>(sums[k].v.data(), pk);
    all.sq_sum.head(pk) += Eigen::Map<const Eigen::VectorXd>(sums[k].v.data() + pk, pk);
  }
  prepared_.scale = options_.standardize ? svm::scaling_from_stats(all) : Eigen::VectorXd::Ones(p);

  if (!method_resolved_) {
    consensus_.nonconvex =
        svm::resolve_nonconvex(options_.admm.nonconvex, n + held_out_total_, p, pen.kind);
    method_resolved_ = true;
  }
  // Setup: each worker scales its rows and factors its system.
  svm::consensus_rhos(n, p, workers_, pen, consensus_, prepared_.carry.rho1, prepared_.carry.rho2);
  detail::svm_phase<svm_setup_reply>(
      system_, self_, worker_handles_, options_.timeout, "setup", 0, [](int, svm_setup_reply&) {},
      svm_setup{to_vector(prepared_.scale), n, p, prepared_.carry.rho1, prepared_.carry.rho2,
                int32_t(options_.admm.method), options_.admm.dense_limit});
  rows_set_up_ = true;
}

// The margins X_k w of every shard and the labels, over all the rows the
// workers hold (in rank order).
void svm_remote_backend::evaluate(const Eigen::VectorXd& w, Eigen::VectorXd& margins,
                                  Eigen::VectorXd& labels) {
  const std::vector<int64_t>& rows = prepared_.rows;
  margins.resize(prepared_.n), labels.resize(prepared_.n);
  std::vector<int64_t> offset(rows.size() + 1, 0);
  for (size_t k = 0; k < rows.size(); ++k) offset[k + 1] = offset[k] + rows[k];
  detail::svm_phase<svm_margins_reply>(
      system_, self_, worker_handles_, options_.timeout, "eval", 0,
      [&](int k, svm_margins_reply& r) {
        const svm_vector &m = r.margins, &yk = r.labels;
        const int64_t n_k = rows[size_t(k)];
        if (int64_t(m.v.size()) != n_k || int64_t(yk.v.size()) != n_k)
          fail("svm worker {} sent {} margins and {} labels for its {} rows", k, m.v.size(),
               yk.v.size(), n_k);
        margins.segment(offset[size_t(k)], n_k) = to_eigen(m);
        labels.segment(offset[size_t(k)], n_k) = to_eigen(yk);
      },
      svm_eval{to_vector(w)});
}

// One fit of `pen` on the prepared rows (svm::consensus_solve: one run, or
// LLA's weighted-L1 runs) from prepared_'s carry (with a zeta when the
// workers kept their state from a fit), which it moves on. Each run ends
// with eval: the margins give the polished bias and F. Fills last_'s fit,
// scale, samples, features, lla and accuracy; `start`: when this fit's time
// starts.
void svm_remote_backend::iterate(const svm::penalty& pen, clock_type::time_point start) {
  const int64_t n = prepared_.n, p = prepared_.p;
  svm_remote_result& result = last_;
  result.samples = n, result.features = p, result.scale = prepared_.scale;
  result.lla = svm::uses_lla(pen, consensus_.nonconvex, n, p);
  svm_actor_options actor_options;
  actor_options.admm = consensus_;
  actor_options.timeout = options_.timeout;
  Eigen::VectorXd margins, labels, last_w;  // the last run's margins, labels and w
  double last_b = 0;
  const svm::consensus_run run = [&](const svm::penalty& run_pen, const Eigen::VectorXd* weights,
                                     svm::consensus_carry& carry, svm::consensus_result& res) {
    svm::consensus_reducer reducer(p, n, workers_, run_pen, carry, consensus_);
    if (weights) reducer.set_l1_weights(*weights);
    detail::drive_consensus(system_, self_, worker_handles_, p, reducer, actor_options, res);
    carry = reducer.carry();
    res.rho1 = reducer.rho1(), res.rho2 = reducer.rho2();
    res.w = reducer.zeta().head(p);
    res.b = reducer.zeta()[p];
    evaluate(res.w, margins, labels);
    if (consensus_.polish_bias) res.b = svm::best_bias(labels, margins, res.b);
    res.objective = svm::mean_hinge(labels, margins.array() + res.b) + pen.value(res.w);
    last_w = res.w, last_b = res.b;
  };
  result.fit = svm::consensus_solve(n, p, pen, consensus_, prepared_.carry, run);
  // The training accuracy of the fit kept: from the last run's margins
  // when it is that run (always for a direct fit), else evaluated again
  // (LLA: a step that was not kept ran last).
  if (result.fit.b != last_b || !(result.fit.w.array() == last_w.array()).all())
    evaluate(result.fit.w, margins, labels);
  const Eigen::VectorXd margin = margins.array() + result.fit.b;
  result.accuracy =
      double(((margin.array() >= 0).cast<double>() * 2 - 1 == labels.array()).count()) / double(n);
  result.fit.time_s = std::chrono::duration<double>(clock_type::now() - start).count();
}

// Whether a fit at `pen` may continue from prepared_ (the previous fit on
// the same rows): with the direct prox the workers' rho1 must stay above
// its threshold for K rho1 (the nonconvex penalties'; it does along a
// decreasing lambda grid with theta fixed); LLA's runs are L1.
bool svm_remote_backend::can_continue(const svm::penalty& pen) const {
  const bool lla = svm::uses_lla(pen, consensus_.nonconvex, prepared_.n, prepared_.p);
  return prepared_.carry.zeta.size() != 0 &&
         (lla || double(workers_) * prepared_.carry.rho1 > pen.rho_threshold());
}

svm::path_fit svm_remote_backend::fit(const svm::penalty& pen, bool warm) {
  const auto start = clock_type::now();
  if (!warm || !can_continue(pen)) {
    if (rows_set_up_) select_phase(selected_folds_, selected_fold_);
    prepare(pen);
  }
  last_ = {};
  iterate(pen, start);
  svm::path_fit out;
  out.objective = last_.fit.objective, out.iterations = last_.fit.iterations;
  out.converged = last_.fit.converged, out.nnz = last_.fit.nnz();
  out.accuracy = last_.accuracy, out.time_s = last_.fit.time_s, out.lla = last_.lla;
  return out;
}

// Held-out predictions of the last fit (weights in the data's units, +1
// when x^T w + b >= 0) on the selected fold.
svm::held_out_score svm_remote_backend::score_held_out() {
  const auto start = clock_type::now();
  const svm::consensus_result& fit = last_.fit;
  const Eigen::VectorXd w = fit.w.cwiseProduct(last_.scale);
  svm::held_out_score score;
  detail::svm_phase<svm_margins_reply>(
      system_, self_, worker_handles_, options_.timeout, "test", 0,
      [&](int k, svm_margins_reply& held) {
        const svm_vector &m = held.margins, &yk = held.labels;
        if (int64_t(m.v.size()) != held_out_rows_[size_t(k)] || yk.v.size() != m.v.size())
          fail("svm worker {} sent {} held-out margins and {} labels for its {} held-out rows", k,
               m.v.size(), yk.v.size(), held_out_rows_[size_t(k)]);
        for (size_t j = 0; j < m.v.size(); ++j)
          score.right += ((m.v[j] + fit.b >= 0) ? 1.0 : -1.0) == yk.v[j];
        score.samples += int64_t(m.v.size());
      },
      svm_test{to_vector(w)});
  score.nnz = (w.array() != 0).count();
  score.time_s = std::chrono::duration<double>(clock_type::now() - start).count();
  return score;
}

}  // namespace merak::actors
