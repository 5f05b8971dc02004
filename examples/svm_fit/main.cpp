// svm_fit: a nonconvex penalised linear SVM (MCP) fitted by consensus ADMM
// over row shards, from a program that uses merak as a library.
//
// Usage: svm_fit [WORKERS]

#include <cstdio>
#include <cstdlib>
#include <exception>

#include "svm/fit.hpp"
#include "svm/objective.hpp"
#include "svm/synthetic.hpp"

int main(int argc, char** argv) {
  namespace svm = merak::svm;
  const int workers = argc > 1 ? std::atoi(argv[1]) : 4;
  if (workers < 1) {
    std::fprintf(stderr, "usage: %s [WORKERS >= 1]\n", argv[0]);
    return 2;
  }
  try {
    // 2000 samples, 200 features of which the first 10 matter.
    svm::synthetic_options data;
    data.n = 2000;
    data.p = 200;
    data.informative = 10;
    const svm::dataset d = svm::make_synthetic(data);

    svm::fit_options o;
    o.pen.kind = svm::penalty_kind::mcp;
    o.pen.lambda = 0.02;
    o.pen.theta = svm::default_theta(o.pen.kind);
    o.workers = workers;  // consensus ADMM over this many row shards
    const svm::fit_result r = svm::fit(d, o);

    const double acc = svm::accuracy(d.y, svm::predict_labels(d.x, r.model.w, r.model.b));
    std::printf(
        "%s on %d workers: %d iterations (%s), %lld of %lld weights non-zero, "
        "training accuracy %.3f\n",
        o.pen.str().c_str(), workers, r.iterations, r.converged ? "converged" : "not converged",
        static_cast<long long>(r.model.nnz()), static_cast<long long>(r.model.features()), acc);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "svm_fit: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
