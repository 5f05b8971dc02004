// `merak svm train | path | predict`: penalised linear SVMs by ADMM (svm/).
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>

#include "actors/svm_consensus.hpp"
#include "apps/commands.hpp"
#include "apps/svm_remote_command.hpp"
#include "apps/tls_flags.hpp"
#include "core/error.hpp"
#include "core/files.hpp"
#include "job/auth.hpp"
#include "svm/data_reader.hpp"
#include "svm/fit.hpp"
#include "svm/objective.hpp"
#include "svm/path.hpp"
#include "svm/select.hpp"

namespace merak::apps {
namespace {

struct svm_train_flags {
  std::string data, format = "auto", penalty = "l1", model, solver = "auto";
  std::string nonconvex = "auto";
  double lambda = 0.01, theta = 0, rho1 = 0, rho2 = 0, tol = 1e-4, relax = 1.0;
  double c = 0;  // LIBLINEAR's -c: lambda = 1 / (C n); 0: not given
  std::string screening = "on";
  int max_iter = 5000, workers = 1, folds = 0, threads = 0;
  int lla_steps = 20;  // reweighted L1 steps after step 0 (lla_options::max_steps)
  std::string lla_start = "zero";
  bool json = false, no_standardize = false;
  // svm train across processes (apps/svm_remote_command.hpp):
  int procs = 0;
  std::string listen, token, token_file;
  job::tls_files tls;
  double timeout_s = 60;
  // svm train --select cv:
  std::string select, thetas;
  uint64_t seed = 1;
  // svm path, and svm train --select cv:
  std::string lambdas = "0.3,0.1,0.03,0.01,0.003,0.001";
  bool cold = false, theta_per_lambda = false, cv_only = false;
};

struct svm_predict_flags {
  std::string model, data, format = "auto", output;
  bool json = false, ignore_extra_features = false;
};

svm::fit_options make_fit_options(const svm_train_flags& f) {
  svm::fit_options o;
  o.pen.kind = svm::parse_penalty_kind(f.penalty);
  o.pen.lambda = f.lambda;
  o.pen.theta = f.theta != 0 ? f.theta : svm::default_theta(o.pen.kind);
  o.pen.validate();
  if (f.rho1 < 0 || f.rho2 < 0)
    fail("--rho1 and --rho2 must be positive (got {}, {})", f.rho1, f.rho2);
  if (!(f.tol > 0)) fail("--tol must be positive (got {})", f.tol);
  if (f.max_iter < 1) fail("--max-iter must be at least 1 (got {})", f.max_iter);
  if (f.workers < 1) fail("--workers must be at least 1 (got {})", f.workers);
  o.admm.rho1 = f.rho1;
  o.admm.rho2 = f.rho2;
  o.admm.rel_tol = f.tol;
  o.admm.abs_tol = f.tol / 10;
  o.admm.max_iter = f.max_iter;
  o.admm.method = svm::parse_w_method(f.solver);
  o.admm.relaxation = f.relax;
  if (f.screening != "on" && f.screening != "off")
    fail("--screening must be on or off (got '{}')", f.screening);
  o.admm.screening = f.screening == "on";
  o.nonconvex = svm::parse_nonconvex_method(f.nonconvex);
  if (f.lla_steps < 0) fail("--lla-steps must not be negative (got {})", f.lla_steps);
  o.lla_opts.max_steps = f.lla_steps;
  o.lla_opts.start = svm::parse_lla_start(f.lla_start);
  o.standardize = !f.no_standardize;
  o.workers = f.workers;
  // K > 1: one CAF worker actor per row shard.
  o.consensus_runner = [](const svm::dataset& d, int k, const svm::penalty& p,
                          const svm::consensus_options& c) {
    actors::svm_actor_options a;
    a.admm = c;
    return actors::consensus_fit_actors(d, k, p, a);
  };
  return o;
}

std::vector<double> parse_grid(const std::string& text, const char* flag);

// --select cv: chooses lambda (and theta) on `d` and sets them in `o`;
// reports the candidates into `out` and, without --json, on stdout.
void select_penalty(const svm_train_flags& f, const svm::dataset& d, svm::fit_options& options,
                    nlohmann::json& out) {
  if (f.select != "cv") fail("--select must be cv (got '{}')", f.select);
  if (f.c > 0) fail("--select cv chooses lambda itself: drop -c");
  svm::selection_options so;
  so.fit = options;
  so.lambdas = parse_grid(f.lambdas, "--lambdas");
  if (!f.thetas.empty()) {
    if (options.pen.kind == svm::penalty_kind::l1) fail("--thetas: the L1 penalty has no theta");
    so.thetas = parse_grid(f.thetas, "--thetas");
  }
  so.folds = f.folds == 0 ? 5 : f.folds;
  so.seed = f.seed;
  const svm::selection sel = svm::select_by_cv(d, so);
  const svm::cv_candidate& pick = sel.candidates[sel.chosen];
  const svm::cv_candidate& best = sel.candidates[sel.best];
  options.pen.lambda = pick.lambda;
  options.pen.theta = pick.theta;
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& c : sel.candidates)
    rows.push_back({{"lambda", c.lambda},
                    {"theta", c.theta},
                    {"cv_mean", c.mean},
                    {"cv_se", c.se},
                    {"cv_mean_nnz", c.mean_nnz}});
  out["selection"] = {{"method", "cv, one-standard-error rule"},
                      {"folds", so.folds},
                      {"seed", so.seed},
                      {"candidates", rows},
                      {"chosen", sel.chosen},
                      {"best", sel.best}};
  if (f.json) return;
  std::printf("select      %d-fold stratified CV (seed %llu), one-standard-error rule\n", so.folds,
              (unsigned long long)so.seed);
  std::printf("  %11s %9s %9s %8s %10s\n", "lambda", "theta", "cv_mean", "cv_se", "mean_nnz");
  for (size_t i = 0; i < sel.candidates.size(); ++i) {
    const auto& c = sel.candidates[i];
    std::printf("  %11.4g %9.4g %9.4f %8.4f %10.1f%s\n", c.lambda, c.theta, c.mean, c.se,
                c.mean_nnz,
                i == sel.chosen ? "  <- chosen" : (i == sel.best ? "  (best mean)" : ""));
  }
  std::printf(
      "chosen      lambda %.4g theta %.4g: cv %.4f (best %.4f - SE %.4f = %.4f at lambda %.4g "
      "theta %.4g)\n",
      pick.lambda, pick.theta, pick.mean, best.mean, best.se, best.mean - best.se, best.lambda,
      best.theta);
}

// The fit across worker processes that the flags describe.
svm_remote_train remote_train_of(const svm_train_flags& f, const svm::fit_options& fit) {
  svm_remote_train t;
  t.data = f.data, t.format = f.format, t.fit = fit, t.procs = f.procs, t.listen = f.listen;
  t.token = f.token_file.empty() ? f.token : job::read_token_file(f.token_file);
  t.tls = use_tls_flags(f.tls, "merak svm");
  t.timeout_s = f.timeout_s, t.threads = f.threads, t.json = f.json, t.folds = f.folds;
  return t;
}

int run_svm_train(const svm_train_flags& f) {
  svm::fit_options o = make_fit_options(f);
  if (f.c < 0 || !std::isfinite(f.c)) fail("-c must be a positive number (got {})", f.c);
  if (f.procs != 0 || !f.listen.empty()) {
    if (f.procs < 1) fail("--listen needs --procs K (the number of worker processes to wait for)");
    if (f.c > 0)
      fail("-c needs the sample count, which worker processes hold: give --lambda 1/(C n)");
    if (!f.select.empty()) fail("--select cv runs on one machine (not with --procs)");
    if (f.workers > 1)
      fail(
          "--workers (actor workers in this process) and --procs (worker processes) exclude "
          "each other");
    if (f.folds == 1 || f.folds < 0) fail("--folds must be at least 2 (got {})", f.folds);
    svm_remote_train t = remote_train_of(f, o);
    t.model = f.model;
    return run_svm_train_remote(t);
  }
  if (f.data.empty()) fail("--data is required");
  svm::set_solver_threads(f.threads);
  if (f.folds == 1 || f.folds < 0) fail("--folds must be at least 2 (got {})", f.folds);
  const auto t0 = std::chrono::steady_clock::now();
  svm::dataset d = svm::read_data(f.data, svm::parse_data_format(f.format, f.data));
  const double read_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // LIBLINEAR minimises |w|_1 + C sum_i loss_i; merak (1/n) sum_i loss_i +
  // lambda |w|_1: the same balance when lambda = 1 / (C n).
  if (f.c > 0) o.pen.lambda = 1.0 / (f.c * double(d.rows()));
  nlohmann::json selected;
  if (!f.select.empty()) select_penalty(f, d, o, selected);
  nlohmann::json out{{"data", f.data},         {"samples", d.rows()},
                     {"features", d.cols()},   {"penalty", svm::penalty_name(o.pen.kind)},
                     {"lambda", o.pen.lambda}, {"theta", o.pen.theta},
                     {"workers", o.workers},   {"read_s", read_s}};
  if (!selected.is_null()) out["selection"] = selected["selection"];
  if (f.folds >= 2 && f.select.empty()) {
    svm::cv_result cv = svm::cross_validate(d, f.folds, o);
    out["folds"] = f.folds;
    out["cv_accuracy"] = cv.accuracy;
    out["cv_mean_nnz"] = cv.mean_nnz;
    out["cv_mean_iterations"] = cv.mean_iterations;
    out["cv_time_s"] = cv.time_s;
  }
  svm::fit_result r = svm::fit(d, o);
  const double acc = svm::accuracy(d.y, svm::predict_labels(d.x, r.model.w, r.model.b));
  out["objective"] = r.objective;
  out["iterations"] = r.iterations;
  out["converged"] = r.converged;
  out["nnz"] = r.model.nnz();
  out["nnz_percent"] = 100.0 * double(r.model.nnz()) / double(std::max<int64_t>(1, d.cols()));
  out["accuracy"] = acc;
  out["time_s"] = r.time_s;
  if (o.workers == 1) {
    out["solver"] = svm::w_method_name(r.method);
    out["rho1"] = r.rho1;
    out["rho2"] = r.rho2;
    out["screen_rounds"] = r.screen_rounds;
    out["working_set"] = r.working_set;
  }
  if (o.pen.kind != svm::penalty_kind::l1) out["nonconvex"] = r.lla ? "lla" : "direct";
  if (r.lla) out["lla_start"] = svm::lla_start_name(o.lla_opts.start);
  if (!f.model.empty()) {
    svm::write_model(r.model, f.model);
    out["model"] = f.model;
  }
  if (f.json) {
    std::cout << out.dump() << std::endl;
    return 0;
  }
  std::printf("data        %s (%lld samples, %lld features)\n", f.data.c_str(), (long long)d.rows(),
              (long long)d.cols());
  std::printf("penalty     %s\n", o.pen.str().c_str());
  if (out.contains("nonconvex")) print_nonconvex(r.lla, o.lla_opts.start);
  std::printf("objective   %.8g\n", r.objective);
  std::printf("iterations  %d%s\n", r.iterations, r.converged ? "" : " (iteration cap reached)");
  if (o.workers == 1 && r.working_set < d.cols())
    std::printf("working set %lld of %lld columns (%d ADMM runs)\n", (long long)r.working_set,
                (long long)d.cols(), r.screen_rounds);
  std::printf("nnz         %lld of %lld (%.2f%%)\n", (long long)r.model.nnz(), (long long)d.cols(),
              out["nnz_percent"].get<double>());
  std::printf("accuracy    %.4f (training data)\n", acc);
  if (out.contains("cv_accuracy"))
    std::printf("cv_accuracy %.4f (%d folds, mean nnz %.1f)\n", out["cv_accuracy"].get<double>(),
                f.folds, out["cv_mean_nnz"].get<double>());
  std::printf("time        %.3f s\n", r.time_s);
  if (!f.model.empty()) std::printf("model       %s\n", f.model.c_str());
  return 0;
}

std::vector<double> parse_grid(const std::string& text, const char* flag) {
  std::vector<double> out;
  size_t a = 0;
  while (a <= text.size()) {
    size_t b = text.find(',', a);
    if (b == std::string::npos) b = text.size();
    const std::string item = text.substr(a, b - a);
    size_t used = 0;
    double v = 0;
    try {
      v = std::stod(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (item.empty() || used != item.size())
      fail("{}: '{}' is not a number (expected a comma-separated list)", flag, item);
    out.push_back(v);
    a = b + 1;
  }
  return out;
}

int run_svm_path(const svm_train_flags& f) {
  svm::path_options o;
  o.fit = make_fit_options(f);
  o.lambdas = parse_grid(f.lambdas, "--lambdas");
  o.folds = f.folds;
  o.warm = !f.cold;
  o.theta_per_lambda = f.theta_per_lambda;
  o.full_fit = !f.cv_only;
  if (f.cv_only && f.folds < 2) fail("--cv-only needs --folds F (F >= 2)");
  if (f.folds == 1 || f.folds < 0) fail("--folds must be at least 2 (got {})", f.folds);
  const bool remote = f.procs != 0 || !f.listen.empty();
  std::vector<svm::penalty> pens;  // --procs: the grid for the consensus path
  if (remote) {
    if (f.procs < 1) fail("--listen needs --procs K (the number of worker processes to wait for)");
    pens = svm::path_penalties(o);
  } else {
    svm::set_solver_threads(f.threads);
  }
  if (f.data.empty() && f.listen.empty()) fail("--data is required");
  svm::dataset d;
  if (!remote) d = svm::read_data(f.data, svm::parse_data_format(f.format, f.data));
  if (!f.json && f.cv_only)
    std::printf("%-10s %11s %11s\n", "lambda", "cv_accuracy", "cv_mean_nnz");
  else if (!f.json)
    std::printf("%-10s %-12s %8s %6s %9s %9s %-10s%s\n", "lambda", "objective", "iters", "nnz",
                "accuracy", "time_s", "converged", f.folds ? "  cv_accuracy cv_mean_nnz" : "");
  const auto print_point = [&](const svm::path_point& pt) {
    if (f.json) {
      nlohmann::json j{{"data", f.data},
                       {"penalty", svm::penalty_name(o.fit.pen.kind)},
                       {"lambda", pt.lambda},
                       {"theta", pt.theta},
                       {"warm", o.warm}};
      if (remote) j["procs"] = f.procs;
      if (o.fit.pen.kind != svm::penalty_kind::l1) j["nonconvex"] = pt.lla ? "lla" : "direct";
      if (pt.lla) j["lla_start"] = svm::lla_start_name(o.fit.lla_opts.start);
      if (o.full_fit) {
        j["objective"] = pt.objective;
        j["iterations"] = pt.iterations;
        j["converged"] = pt.converged;
        j["nnz"] = pt.nnz;
        j["accuracy"] = pt.accuracy;
        j["time_s"] = pt.time_s;
      }
      if (f.folds >= 2) {
        j["folds"] = f.folds;
        j["cv_accuracy"] = pt.cv_accuracy;
        j["cv_mean_nnz"] = pt.cv_mean_nnz;
        j["cv_time_s"] = pt.cv_time_s;
      }
      std::cout << j.dump() << std::endl;
    } else if (!o.full_fit) {
      std::printf("%-10g %11.4f %11.1f\n", pt.lambda, pt.cv_accuracy, pt.cv_mean_nnz);
      std::fflush(stdout);
    } else {
      std::printf("%-10g %-12.6g %8d %6lld %9.4f %9.4f %-10s", pt.lambda, pt.objective,
                  pt.iterations, (long long)pt.nnz, pt.accuracy, pt.time_s,
                  pt.converged ? "yes" : "no");
      if (f.folds >= 2) std::printf("  %11.4f %11.1f", pt.cv_accuracy, pt.cv_mean_nnz);
      std::printf("\n");
      std::fflush(stdout);
    }
  };
  if (remote) {
    svm_remote_train t = remote_train_of(f, o.fit);
    t.warm = o.warm;
    run_svm_path_remote(t, pens, o.full_fit, print_point);
    return 0;
  }
  svm::fit_path(d, o, print_point);
  return 0;
}

int run_svm_predict(const svm_predict_flags& f) {
  svm::linear_model m = svm::read_model(f.model);
  svm::dataset d = svm::read_data(f.data, svm::parse_data_format(f.format, f.data), m.features());
  if (d.cols() > m.features()) {
    if (!f.ignore_extra_features)
      fail(
          "data file '{}' has {} features, the model '{}' {}: the data is not what the model was "
          "fitted on (--ignore-extra-features gives features {}..{} weight 0, as LIBLINEAR "
          "does)",
          f.data, d.cols(), f.model, m.features(), m.features() + 1, d.cols());
    // Features the model never saw have weight 0 (as LIBLINEAR does).
    Eigen::VectorXd w = Eigen::VectorXd::Zero(d.cols());
    w.head(m.features()) = m.w;
    m.w = std::move(w);
  }
  Eigen::VectorXd pred = svm::predict_labels(d.x, m.w, m.b);
  const double acc = svm::accuracy(d.y, pred);
  if (!f.output.empty()) {
    std::string labels;
    for (int64_t i = 0; i < pred.size(); ++i) labels += pred[i] > 0 ? "1\n" : "-1\n";
    write_file_atomic(f.output, labels);
  }
  if (f.json) {
    std::cout << nlohmann::json{{"model", f.model},
                                {"data", f.data},
                                {"samples", d.rows()},
                                {"accuracy", acc}}
                     .dump()
              << std::endl;
  } else {
    std::printf("accuracy %.4f (%lld samples)\n", acc, (long long)d.rows());
  }
  return 0;
}

// --procs (with `procs_help`), --listen, --token, --timeout-s: the flags of
// a consensus fit across worker processes (svm train and svm path).
void add_process_flags(CLI::App* c, svm_train_flags& f, const char* procs_help) {
  c->add_option("--procs", f.procs, procs_help);
  c->add_option("--listen", f.listen,
                "With --procs: listen on HOST[:PORT] for workers started elsewhere");
  auto* token =
      c->add_option("--token", f.token,
                    "With --procs: the job token workers must present (default: MERAK_JOB_TOKEN, "
                    "else random)");
  c->add_option("--token-file", f.token_file,
                "With --procs: read the job token from this file (mode 0600; a token on the "
                "command line shows in ps)")
      ->excludes(token);
  c->add_option("--timeout-s", f.timeout_s,
                "With --procs: bound on workers joining and on each phase of an iteration")
      ->capture_default_str();
  add_tls_flags(*c, f.tls);
}

// The data and solver flags that svm train and svm path share.
void add_fit_flags(CLI::App* c, svm_train_flags& f) {
  c->add_option("--data,data", f.data,
                "Training data (LIBSVM text or CSV, label first; also the first argument, as "
                "liblinear-train takes it); required unless --listen");
  c->add_option("--format", f.format, "libsvm, csv or auto (by file name)")->capture_default_str();
  c->add_option("--penalty", f.penalty, "l1, scad, mcp, lsp or capped-l1")->capture_default_str();
  c->add_option("--theta", f.theta,
                "Second penalty parameter (default: SCAD 3.7, MCP 3, LSP 1, capped-l1 1)");
  c->add_option("--rho1", f.rho1, "ADMM penalty of w = z (default: automatic)");
  c->add_option("--rho2", f.rho2, "ADMM penalty of the hinge split (default: automatic)");
  c->add_option("--tol", f.tol, "Relative residual tolerance (absolute: tol/10)")
      ->capture_default_str();
  c->add_option("--relax", f.relax, "ADMM over-relaxation alpha in [1, 2)")->capture_default_str();
  c->add_option("--screening", f.screening,
                "Wide data, (weighted) L1 steps: ADMM over working sets of columns checked by "
                "the KKT conditions (on) or over every column (off)")
      ->capture_default_str();
  c->add_option(
       "--nonconvex", f.nonconvex,
       "Nonconvex penalties: lla (reweighted L1 steps, see --lla-start), direct (ADMM with "
       "the nonconvex prox) or auto (lla for LSP and when features outnumber samples, "
       "else direct)")
      ->capture_default_str();
  c->add_option("--lla-steps", f.lla_steps,
                "Nonconvex (lla): at most this many reweighted L1 steps after the first, per "
                "chain (--lla-start best may run two chains)")
      ->capture_default_str();
  c->add_option("--lla-start", f.lla_start,
                "Nonconvex (lla): start the reweighted L1 steps from w = 0 (zero: for LSP the L1 "
                "fit at lambda/theta), from the L1 fit at lambda (l1), or run both and keep the "
                "lower objective (best); l1 and best differ from zero for LSP with theta != 1 only")
      ->capture_default_str();
  c->add_option("--solver", f.solver, "w-step: auto, cholesky, woodbury or cg")
      ->capture_default_str();
  c->add_flag("--no-standardize", f.no_standardize, "Fit on the features as they are");
  c->add_option("--threads", f.threads, "Threads for the matrix products (default: all cores)");
}

}  // namespace

action add_svm_command(CLI::App& parent) {
  auto* s =
      parent.add_subcommand("svm", "Penalised linear SVMs (L1, SCAD, MCP, LSP, capped-L1) by ADMM");
  s->require_subcommand(1);

  auto tf = std::make_shared<svm_train_flags>();
  auto* t = s->add_subcommand("train", "Fit a model; optionally cross-validate");
  t->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  add_fit_flags(t, *tf);
  auto* lambda = t->add_option("--lambda", tf->lambda,
                               "Penalty weight: the objective is (1/n) sum of hinge losses + "
                               "lambda P(w)")
                     ->capture_default_str();
  t->add_option("-c", tf->c,
                "LIBLINEAR's cost C instead of --lambda: lambda = 1/(C n) for n samples (the "
                "same balance of penalty and total loss)")
      ->excludes(lambda);
  t->add_option("--max-iter", tf->max_iter, "Iteration cap")->capture_default_str();
  t->add_option("--workers", tf->workers, "Consensus ADMM over K row shards, one actor each")
      ->capture_default_str();
  add_process_flags(t, *tf,
                    "Consensus ADMM over K worker processes (merak svm worker), started here on "
                    "loopback unless --listen");
  t->add_option("--folds", tf->folds,
                "Cross-validate with F folds (sample i in fold i mod F); with --select cv: the "
                "folds of the selection (default 5)");
  t->add_option("--select", tf->select,
                "cv: choose lambda (and theta with --thetas) by stratified, shuffled K-fold CV "
                "over --lambdas, keeping the sparsest fit within one standard error of the best "
                "mean accuracy; then fit all the data with it");
  t->add_option("--lambdas", tf->lambdas, "With --select cv: the lambda grid")
      ->capture_default_str();
  t->add_option("--thetas", tf->thetas,
                "With --select cv, nonconvex penalties: a theta grid (default: --theta only)");
  t->add_option("--seed", tf->seed, "With --select cv: the seed of the folds' shuffle")
      ->capture_default_str();
  t->add_option("--model,model", tf->model,
                "Write the model here (.json: JSON, otherwise LIBLINEAR-like text; also the "
                "argument after the data, as liblinear-train takes it)");
  t->add_flag("--json", tf->json, "Print one JSON object");

  auto hf = std::make_shared<svm_train_flags>();
  auto* h = s->add_subcommand(
      "path", "Fit a lambda grid, each fit warm-started from the last; one line per lambda");
  h->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  add_fit_flags(h, *hf);
  h->add_option("--lambdas", hf->lambdas, "Comma-separated grid (walked from the largest down)")
      ->capture_default_str();
  h->add_option("--max-iter", hf->max_iter, "Iteration cap per lambda")->capture_default_str();
  h->add_option("--folds", hf->folds,
                "Cross-validate each lambda with F folds (i in fold i mod F)");
  h->add_flag("--cold", hf->cold, "Start every lambda from zero (no warm start)");
  h->add_flag("--cv-only", hf->cv_only,
              "With --folds: only the fold paths (no fit on all the data; lines carry the CV "
              "fields)");
  h->add_flag("--theta-per-lambda", hf->theta_per_lambda,
              "--theta is a multiple of lambda (each lambda gets theta * lambda)");
  h->add_flag("--json", hf->json, "One JSON object per lambda");
  add_process_flags(h, *hf,
                    "Fit every lambda by consensus ADMM over K worker processes (merak svm "
                    "worker, started here on loopback unless --listen); warm-started across "
                    "lambda (--cold: one cold fit per lambda)");

  auto pf = std::make_shared<svm_predict_flags>();
  auto* p = s->add_subcommand("predict", "Accuracy of a model on labelled data");
  p->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  // Positional as liblinear-predict takes them: DATA MODEL [OUTPUT].
  p->add_option("--data,data", pf->data, "Labelled data (LIBSVM text or CSV)")->required();
  p->add_option("--model,model", pf->model, "Model file from svm train (or from LIBLINEAR)")
      ->required();
  p->add_option("--output,output", pf->output, "Write one predicted label per line here");
  p->add_option("--format", pf->format, "libsvm, csv or auto (by file name)")
      ->capture_default_str();
  p->add_flag("--ignore-extra-features", pf->ignore_extra_features,
              "Data with more features than the model: give the extra ones weight 0 (what "
              "LIBLINEAR does) instead of refusing it");
  p->add_flag("--json", pf->json, "Print one JSON object");

  action worker = add_svm_worker_command(*s);

  return [s, t, h, p, tf, hf, pf, worker] {
    if (s->got_subcommand(t)) return run_svm_train(*tf);
    if (s->got_subcommand("worker")) return worker();
    if (s->got_subcommand(h)) return run_svm_path(*hf);
    if (s->got_subcommand(p)) return run_svm_predict(*pf);
    return 1;
  };
}

}  // namespace merak::apps
