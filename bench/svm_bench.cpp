#include <chrono>

#include "bench/svm_bench.hpp"
#include "core/process_stats.hpp"
#include "svm/data_reader.hpp"
#include "svm/fit.hpp"
#include "svm/objective.hpp"
#include "svm/synthetic.hpp"

namespace merak::bench {

nlohmann::json run_svm_bench(const svm_bench_options& options) {
  using clock = std::chrono::steady_clock;
  svm::set_solver_threads(options.threads);
  const auto t0 = clock::now();
  svm::dataset d =
      options.data.empty()
          ? svm::make_synthetic(options.synthetic)
          : svm::read_data(options.data, svm::parse_data_format(options.format, options.data));
  const double load_s = std::chrono::duration<double>(clock::now() - t0).count();
  nlohmann::json out{{"benchmark", "svm"},
                     {"data", options.data.empty() ? "synthetic" : options.data},
                     {"samples", d.rows()},
                     {"features", d.cols()},
                     {"stored_entries", d.x.nnz()},
                     {"sparse", d.x.is_sparse()},
                     {"penalty", svm::penalty_name(options.fit.pen.kind)},
                     {"lambda", options.fit.pen.lambda},
                     {"theta", options.fit.pen.theta},
                     {"workers", options.fit.workers},
                     {"load_s", load_s}};
  if (options.folds >= 2) {
    svm::cv_result cv = svm::cross_validate(d, options.folds, options.fit);
    out["folds"] = options.folds;
    out["cv_accuracy"] = cv.accuracy;
    out["cv_mean_nnz"] = cv.mean_nnz;
    out["cv_time_s"] = cv.time_s;
    out["cv_fit_s"] = cv.time_s / options.folds;
  }
  const auto t1 = clock::now();
  svm::fit_result r = svm::fit(d, options.fit);
  const double fit_wall = std::chrono::duration<double>(clock::now() - t1).count();
  out["objective"] = r.objective;
  out["iterations"] = r.iterations;
  out["converged"] = r.converged;
  out["nnz"] = r.model.nnz();
  out["accuracy"] = svm::accuracy(d.y, svm::predict_labels(d.x, r.model.w, r.model.b));
  out["time_s"] = r.time_s;
  out["fit_wall_s"] = fit_wall;  // includes standardisation
  if (options.fit.workers == 1) {
    out["solver"] = svm::w_method_name(r.method);
    out["cg_iterations"] = r.cg_iterations;
    out["rho1"] = r.rho1;
    out["rho2"] = r.rho2;
    out["screen_rounds"] = r.screen_rounds;
    out["working_set"] = r.working_set;
  }
  if (options.fit.pen.kind != svm::penalty_kind::l1) out["nonconvex"] = r.lla ? "lla" : "direct";
  if (r.lla) out["lla_start"] = svm::lla_start_name(options.fit.lla_opts.start);
  out["threads"] = Eigen::nbThreads();
  out["peak_rss_mb"] = double(peak_rss_bytes()) / (1 << 20);
  return out;
}

}  // namespace merak::bench
