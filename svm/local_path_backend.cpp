#include "svm/local_path_backend.hpp"

#include <utility>

#include "core/error.hpp"
#include "svm/objective.hpp"
#include "svm/standardize.hpp"

namespace merak::svm {

local_path_backend::local_path_backend(const dataset& d, const fit_options& options,
                                       std::vector<int> fold_of)
    : data_(d), options_(options), fold_of_(std::move(fold_of)) {}

void local_path_backend::select_rows(int folds, int fold) {
  folds_ = folds;
  state_ = {};
  if (folds == 0) {
    train_ = data_;
    held_out_ = {};
  } else {
    std::vector<int64_t> train_rows, held_out_rows;
    for (int64_t i = 0; i < data_.rows(); ++i) {
      const int fold_of_i = fold_of_.empty() ? int(i % folds) : fold_of_[size_t(i)];
      (fold_of_i == fold ? held_out_rows : train_rows).push_back(i);
    }
    if (held_out_rows.empty() || train_rows.empty())
      fail("fold {} of {} holds no samples", fold, folds);
    train_ = data_.select_rows(train_rows);
    held_out_ = data_.select_rows(held_out_rows);
  }
  scale_ = Eigen::VectorXd::Ones(data_.cols());
  if (options_.standardize) {
    scale_ = scaling_from_stats(compute_column_stats(train_.x));
    train_.x.scale_columns(scale_);
  }
  densify_if_dense(train_.x);
}

path_fit local_path_backend::fit(const penalty& pen, bool warm) {
  const admm_state* start = warm && !state_.empty() ? &state_ : nullptr;
  const bool lla = uses_lla(pen, options_.nonconvex, train_.rows(), train_.cols());
  last_ = lla ? lla_solve(train_.x, train_.y, pen, options_.admm, options_.lla_opts, start)
              : admm_solve(train_.x, train_.y, pen, options_.admm, {}, start);
  path_fit out;
  out.objective = last_.objective, out.iterations = last_.iterations;
  out.converged = last_.converged, out.nnz = last_.nnz(), out.time_s = last_.time_s;
  out.lla = lla;
  if (folds_ == 0)
    out.accuracy =
        accuracy(data_.y, predict_labels(data_.x, last_.w.cwiseProduct(scale_), last_.b));
  state_ = std::move(last_.state);
  return out;
}

held_out_score local_path_backend::score_held_out() {
  MERAK_CHECK(folds_ != 0, "no fold selected to score");
  const Eigen::VectorXd w = last_.w.cwiseProduct(scale_);
  const Eigen::VectorXd predicted = predict_labels(held_out_.x, w, last_.b);
  held_out_score out;
  out.right = (held_out_.y.array() == predicted.array()).count();
  out.samples = held_out_.rows();
  out.nnz = last_.nnz();
  return out;
}

}  // namespace merak::svm
