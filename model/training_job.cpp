#include "model/training_job.hpp"

#include "model/trainer.hpp"

namespace merak::model {

bool training_job::done() const {
  return step() >= options().steps;
}

bool training_job::checkpoint_due() const {
  const auto& o = options();
  if (o.save_dir.empty()) return false;
  if (done()) return true;
  return o.save_interval > 0 && step() % o.save_interval == 0;
}

}  // namespace merak::model
