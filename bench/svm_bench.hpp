#pragma once
// `merak bench svm`: fit time, iterations, objective, non-zeros, CV accuracy
// and peak memory of the ADMM SVM on a data file or a synthetic problem.
// Kept apart from benchmarks.hpp so that the GPT benchmarks do not depend
// on svm/.

#include <nlohmann/json.hpp>

#include <string>

#include "svm/fit.hpp"
#include "svm/synthetic.hpp"

namespace merak::bench {

struct svm_bench_options {
  std::string data;  // empty: synthetic
  std::string format = "auto";
  svm::synthetic_options synthetic;
  svm::fit_options fit;
  int folds = 0;
  int threads = 0;  // 0: all cores
};

nlohmann::json run_svm_bench(const svm_bench_options& options);

}  // namespace merak::bench
