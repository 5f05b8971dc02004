#pragma once
// What a run of training is to the code that drives it (merak train, an
// embedding program): steps, validation, checkpoints. The single-device
// trainer (model/trainer.hpp) and the actor runtime (actors/
// parallel_trainer.hpp) both are one; actors::make_training_job picks.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace merak::model {

struct train_options;
struct step_result;

class training_job {
 public:
  virtual ~training_job() = default;

  virtual const train_options& options() const = 0;
  // Completed steps (a resumed run starts at its checkpoint's step).
  virtual int64_t step() const = 0;
  bool done() const;
  // One step of the global batch. Throws merak::error naming what failed.
  virtual step_result train_step() = 0;
  // Mean loss over the fixed validation batches.
  virtual double validation_loss() = 0;
  // Writes a checkpoint of the current step; returns its directory.
  virtual std::string save() = 0;
  // True when a checkpoint is due after the step just completed: every
  // save_interval steps and at the end, when there is a save directory.
  bool checkpoint_due() const;
  // Whether this process writes the run's metrics and checkpoints (in a
  // job of several processes only process 0 does).
  virtual bool writes_outputs() const { return true; }
  // Figures of the last step beyond step_result, for the metrics line
  // (name, value): the pipeline bubble, data-parallel bytes, ...
  virtual std::vector<std::pair<std::string, double>> step_metrics() const { return {}; }
  // What runs, the model and its layout: one or more lines.
  virtual std::string describe() const = 0;
};

}  // namespace merak::model
