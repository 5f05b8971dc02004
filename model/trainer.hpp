#pragma once
// Single-device GPT training: the reference run.
//
// Owns the corpus, the graph, the parameters, the executor, AdamW and the
// schedule; train_step() runs one full forward + backward + update of the
// global batch. Resuming from a checkpoint restores parameters, optimizer
// moments, the step and the data position, so a resumed run is bit-for-bit
// the uninterrupted one (for the same thread count). Not thread-safe.

#include <map>
#include <memory>
#include <optional>
#include <string>

#include "model/adamw.hpp"
#include "model/checkpoint.hpp"
#include "model/data.hpp"
#include "model/executor.hpp"
#include "model/gpt.hpp"
#include "model/indexed_corpus.hpp"
#include "model/training_job.hpp"

namespace merak::model {

struct train_options {
  std::string data;                     // corpus file (--data), or:
  std::vector<std::string> data_path;   // --data-path: "P" or "W1 P1 W2 P2 ..." (indexed_corpus)
  std::string split = "969,30,1";       // --split of --data-path's documents
  tokenizer tokens = tokenizer::bytes;  // words: hashed words into [0, model.vocab)
  gpt_config model;                     // model.max_seq is the training sequence length T
  int batch = 8;                        // B, the global batch of a step
  int64_t steps = 100;                  // total steps (a resumed run ends at the same step)
  float lr = 6e-4f;                     // peak learning rate
  float min_lr = -1;                    // final learning rate; < 0 means lr / 10
  int64_t warmup = -1;                  // warm-up steps; < 0 means steps / 20
  float warmup_init = 0;                // learning rate of step 0, where warm-up starts
  float weight_decay = 0.1f;
  float adam_beta1 = 0.9f, adam_beta2 = 0.95f, adam_eps = 1e-8f;
  lr_decay decay = lr_decay::cosine;  // after warm-up
  int64_t decay_steps = -1;           // where the decay ends; < 0 means steps
  float grad_clip = 1.0f;  // global norm; 0 disables
  // A step whose loss or gradient norm is not finite leaves the weights and
  // the optimizer state as they were (Megatron's skipped iteration) instead
  // of ending the run; the data stream and the step count move on.
  bool skip_nonfinite = false;
  uint64_t seed = 1337;
  // Selective recomputation (--recompute selective): every attention core
  // keeps nothing from forward and is recomputed in backward.
  bool recompute_attention = false;
  // Where the parameters, optimizer state and activations live (a CUDA
  // device needs gpu::enable_cuda() first; batches move there each step).
  device where = device::cpu();
  double val_fraction = 0.1;
  int eval_batches = 4;       // validation batches per evaluation
  std::string save_dir;       // empty: no checkpoints
  int64_t save_interval = 0;  // steps between checkpoints; 0: only at the end
  std::string load;           // checkpoint or run directory to resume from

  // Throws merak::error naming the flag when options are inconsistent.
  void validate() const;
  // The learning-rate schedule these options describe (defaults applied).
  lr_schedule schedule() const;
  // The optimizer's hyper-parameters.
  adamw_config adam() const;
};

struct step_result {
  int64_t step = 0;  // 1-based count of completed steps
  double loss = 0;
  float lr = 0;
  double grad_norm = 0;
  double step_s = 0;
  double tokens_per_s = 0;
  double forward_s = 0, backward_s = 0, optimizer_s = 0;  // parts of step_s
  bool skipped = false;  // not applied (skip_nonfinite and a non-finite loss or norm)
};

// Whether a step's update is skipped: skip_nonfinite is on and its loss or
// gradient norm is not finite.
bool skip_update(const train_options& opts, double loss, double grad_norm);

// Loads the checkpoint `opts.load` into `store` and `opt` (checking that it
// holds this model) and returns its step; a checkpoint trained with another
// seed continues its own data stream (opts.seed is updated). Shared by the
// single-device and the parallel trainers. Throws merak::error naming the
// checkpoint.
int64_t resume_checkpoint(train_options& opts, parameter_store& store, adamw& opt,
                          const std::string& data_name = {});

// Whether the run starts at step 0 although opts.load is given: --load
// names the --save directory itself and it holds nothing to resume yet
// (nothing_to_resume), Megatron-LM's `--save D --load D` for a new D. Logs
// a warning saying so. Any other --load that holds no checkpoint is left to
// the load, which names it.
bool starts_without_checkpoint(const train_options& opts);

// The checks of resume_checkpoint on a checkpoint's metadata alone (the
// parallel trainer's stage actors then load their own parts): returns the
// step; may update opts.seed. Warns when the checkpoint was trained on
// other data than `data_name` (the run's token_source::name(); empty: not
// compared). Throws merak::error naming `dir`.
int64_t check_resume(train_options& opts, const metadata_map& metadata, const std::string& dir,
                     const std::string& data_name = {});
// Fails naming the corpus when its ids cannot all be below the model's
// vocabulary (token_source::check_vocab).
void check_corpus_vocab(const token_source& corpus, const gpt_config& model);
// The training data `opts` names: --data's text file or --data-path's
// datasets. Throws merak::error naming the file.
std::shared_ptr<const token_source> open_token_source(const train_options& opts);
// The metadata a checkpoint of this run at `step` carries (model, seed, data
// position: the step and the samples consumed, data name, tokenizer).
std::map<std::string, std::string> checkpoint_metadata(const train_options& opts, int64_t step,
                                                       const std::string& data_name);

class trainer final : public training_job {
 public:
  // Loads the data, builds the model and, with options.load, resumes.
  // Throws merak::error on bad data, options or checkpoints.
  explicit trainer(train_options opts);
  // For tests and benchmarks: a corpus already in memory.
  trainer(train_options opts, text_corpus corpus);
  trainer(train_options opts, std::shared_ptr<const token_source> corpus);

  step_result train_step() override;
  double validation_loss() override;
  std::string save() override;
  std::string describe() const override;
  // The bytes held in the last step: memory_bytes/parameters, /gradients
  // (and /gradients_peak, the same here: nothing is sharded or copied out),
  // /optimizer (the AdamW moments) and /activations_peak (after forward).
  std::vector<std::pair<std::string, double>> step_metrics() const override;

  int64_t step() const override { return step_; }
  const train_options& options() const override { return opts_; }
  const graph& model_graph() const { return graph_; }
  const parameter_store& parameters() const { return store_; }
  int64_t resumed_from() const { return resumed_from_; }
  executor& model_executor() { return *exec_; }

 private:
  void init();
  std::map<std::string, std::string> metadata() const;

  train_options opts_;
  std::shared_ptr<const token_source> corpus_;
  graph graph_;
  parameter_store store_;
  std::unique_ptr<executor> exec_;
  std::unique_ptr<adamw> opt_;
  lr_schedule schedule_;
  int64_t step_ = 0;
  int64_t resumed_from_ = -1;
};

}  // namespace merak::model
