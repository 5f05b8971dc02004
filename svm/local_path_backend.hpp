#pragma once
// The path backend on one machine (svm/path.hpp): the selected rows copied,
// standardised on themselves (when the fit options say so) and fitted by
// the two-block ADMM or LLA (svm/admm.hpp, svm/lla.hpp), each fit able to
// continue from the ADMM state of the last.

#include <cstdint>
#include <vector>

#include <Eigen/Core>

#include "svm/path.hpp"

namespace merak::svm {

class local_path_backend final : public path_backend {
 public:
  // d: all the data (must outlive the backend). options: standardize, admm,
  // lla_opts and the nonconvex method, which the caller resolves on all of d
  // (resolve_nonconvex) so that every selection uses one method. fold_of:
  // sample i's fold (entries in [0, folds)); empty: i mod folds.
  local_path_backend(const dataset& d, const fit_options& options, std::vector<int> fold_of = {});

  // Throws merak::error when the fold's training or held-out part is empty.
  void select_rows(int folds, int fold) override;
  // The training accuracy only on all rows (0 on a fold's rows).
  path_fit fit(const penalty& pen, bool warm) override;
  // Counts no time (the path's CV time is the fold fits' solver time).
  held_out_score score_held_out() override;

 private:
  const dataset& data_;
  fit_options options_;
  std::vector<int> fold_of_;
  int folds_ = 0;
  dataset train_;          // the selected rows, standardised
  dataset held_out_;       // the fold's held-out rows, in the data's units
  Eigen::VectorXd scale_;  // (p): weights in the data's units are w_j * scale_j
  admm_state state_;       // where the last fit on train_ ended (empty: none yet)
  admm_result last_;       // the last fit (its state moved to state_)
};

}  // namespace merak::svm
