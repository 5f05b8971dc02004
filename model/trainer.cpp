#include "model/trainer.hpp"

#include <chrono>
#include <cmath>

#include <spdlog/spdlog.h>

#include "core/error.hpp"
#include "model/checkpoint.hpp"
#include "model/gemm.hpp"
#include "model/model_metadata.hpp"
#include "model/sharded_checkpoint.hpp"

namespace merak::model {

void check_corpus_vocab(const token_source& corpus, const gpt_config& model) {
  corpus.check_vocab(model.vocab);
}

std::shared_ptr<const token_source> open_token_source(const train_options& opts) {
  if (opts.data.empty() == opts.data_path.empty())
    fail("give the training data by --data FILE or by --data-path PREFIX (one of them)");
  if (!opts.data_path.empty())
    return std::make_shared<indexed_corpus>(opts.data_path, opts.split, opts.model.max_seq,
                                            opts.model.vocab);
  return std::make_shared<text_corpus>(opts.data, opts.model.max_seq, opts.val_fraction,
                                       opts.tokens, opts.model.vocab);
}

void train_options::validate() const {
  model.validate();
  if (batch < 1) fail("--batch must be at least 1 (got {})", batch);
  if (steps < 0) fail("--steps must not be negative (got {})", steps);
  if (!(lr > 0) || !std::isfinite(lr)) fail("--lr must be a positive number (got {})", lr);
  if (!std::isfinite(min_lr) || min_lr > lr)
    fail("--min-lr must be a number up to --lr {} (got {}; negative: lr / 10)", lr, min_lr);
  if (!(warmup_init >= 0) || !std::isfinite(warmup_init))
    fail("--lr-warmup-init must be a number of at least 0 (got {})", warmup_init);
  if (!(weight_decay >= 0) || !std::isfinite(weight_decay))
    fail("--weight-decay must be a number of at least 0 (got {})", weight_decay);
  if (!(val_fraction > 0 && val_fraction < 1))
    fail("--val-fraction must be between 0 and 1 (got {})", val_fraction);
  if (save_interval < 0) fail("--save-interval must not be negative (got {})", save_interval);
  if (save_interval > 0 && save_dir.empty()) fail("--save-interval needs --save DIR");
  if (eval_batches < 1) fail("--eval-batches must be at least 1 (got {})", eval_batches);
  for (auto [name, beta] : {std::pair{"--adam-beta1", adam_beta1}, {"--adam-beta2", adam_beta2}})
    if (!(beta >= 0 && beta < 1)) fail("{} must be from 0 to below 1 (got {})", name, beta);
  if (!(adam_eps > 0) || !std::isfinite(adam_eps))
    fail("--adam-eps must be a positive number (got {})", adam_eps);
  if (!(grad_clip >= 0) || !std::isfinite(grad_clip))
    fail("--grad-clip must be a number of at least 0 (got {})", grad_clip);
}

lr_schedule train_options::schedule() const {
  lr_schedule s;
  s.max_lr = lr;
  s.min_lr = min_lr >= 0 ? min_lr : lr / 10;
  s.warmup_steps = warmup >= 0 ? warmup : steps / 20;
  s.warmup_init = warmup_init;
  s.total_steps = std::max<int64_t>(1, decay_steps >= 0 ? decay_steps : steps);
  s.style = decay;
  return s;
}

adamw_config train_options::adam() const {
  return {.beta1 = adam_beta1, .beta2 = adam_beta2, .eps = adam_eps, .weight_decay = weight_decay};
}

trainer::trainer(train_options opts)
    : opts_((opts.validate(), std::move(opts))),
      corpus_(open_token_source(opts_)),
      store_(opts_.seed, opts_.where) {
  init();
}

trainer::trainer(train_options opts, text_corpus corpus)
    : trainer(std::move(opts), std::make_shared<const text_corpus>(std::move(corpus))) {}

trainer::trainer(train_options opts, std::shared_ptr<const token_source> corpus)
    : opts_((opts.validate(), std::move(opts))),
      corpus_(std::move(corpus)),
      store_(opts_.seed, opts_.where) {
  if (corpus_->seq() != opts_.model.max_seq)
    fail("corpus windows are {} tokens but the model's --seq is {}", corpus_->seq(),
         opts_.model.max_seq);
  check_corpus_vocab(*corpus_, opts_.model);
  init();
}

void trainer::init() {
  graph_ = build_model(opts_.model);
  exec_ = std::make_unique<executor>(graph_, store_);
  exec_->set_selective_recompute(opts_.recompute_attention);
  opt_ = std::make_unique<adamw>(opts_.adam(), store_.all());
  schedule_ = opts_.schedule();
  if (!opts_.load.empty() && !starts_without_checkpoint(opts_)) {
    step_ = resume_checkpoint(opts_, store_, *opt_, corpus_ ? corpus_->name() : std::string());
    resumed_from_ = step_;
  }
}

int64_t check_resume(train_options& opts, const metadata_map& metadata, const std::string& dir,
                     const std::string& data_name) {
  auto meta = metadata;
  auto expect = model_metadata_json(opts.model);
  if (meta["merak.model"] != expect)
    fail("checkpoint '{}' holds model {} but this run builds {}", dir, meta["merak.model"], expect);
  // Checkpoints from before the option were all byte-level.
  std::string tok = meta.count("merak.tokenizer") ? meta["merak.tokenizer"] : "bytes";
  if (tok != tokenizer_name(opts.tokens))
    fail("checkpoint '{}' was trained with --tokenizer {} but this run uses --tokenizer {}", dir,
         tok, tokenizer_name(opts.tokens));
  const int64_t step = metadata_count(meta, "merak.step", dir);
  if (!data_name.empty() && meta.count("merak.data") && meta["merak.data"] != data_name)
    spdlog::warn(
        "checkpoint '{}' was trained on '{}' and this run reads '{}': training goes on from step "
        "{} on the new data",
        dir, meta["merak.data"], data_name, step);
  // Datasets on disk: sample g is row g mod B of step g / B, so the step
  // continues the sample stream only at the batch that consumed it.
  if (!opts.data_path.empty() && meta.count("merak.data_samples")) {
    const int64_t samples = metadata_count(meta, "merak.data_samples", dir);
    if (samples != step * opts.batch)
      fail(
          "checkpoint '{}' consumed {} samples in {} steps but this run's --global-batch-size is "
          "{}: resume with the batch it was trained with",
          dir, samples, step, opts.batch);
  }
  try {
    uint64_t seed = std::stoull(meta.at("merak.seed"));
    if (seed != opts.seed) {
      spdlog::warn("checkpoint was trained with --seed {}; continuing its data stream", seed);
      opts.seed = seed;
    }
  } catch (const std::logic_error&) {
    fail("checkpoint '{}': metadata merak.seed is missing or not a number", dir);
  }
  return step;
}

bool starts_without_checkpoint(const train_options& opts) {
  if (opts.load.empty() || opts.save_dir.empty() || !same_directory(opts.load, opts.save_dir) ||
      !nothing_to_resume(opts.load))
    return false;
  spdlog::warn(
      "--load '{}' (the --save directory) holds no checkpoint yet: this run starts at step 0",
      opts.load);
  return true;
}

int64_t resume_checkpoint(train_options& opts, parameter_store& store, adamw& opt,
                          const std::string& data_name) {
  checkpoint_reader ckpt(opts.load);
  const int64_t step = check_resume(opts, ckpt.metadata(), ckpt.dir(), data_name);
  load_checkpoint(ckpt.dir(), store, opt);
  spdlog::info("resumed from '{}' at step {}", ckpt.dir(), step);
  return step;
}

metadata_map checkpoint_metadata(const train_options& opts, int64_t step,
                                 const std::string& data_name) {
  return {{"merak.model", model_metadata_json(opts.model)},
          {"merak.seed", std::to_string(opts.seed)},
          // The data stream is keyed by (seed, step): the step is the position.
          {"merak.data_position", std::to_string(step)},
          {"merak.data_samples", std::to_string(step * opts.batch)},
          {"merak.data", data_name},
          {"merak.tokenizer", std::string(tokenizer_name(opts.tokens))}};
}

std::map<std::string, std::string> trainer::metadata() const {
  return checkpoint_metadata(opts_, step_, corpus_->name());
}

bool skip_update(const train_options& opts, double loss, double grad_norm) {
  return opts.skip_nonfinite && !(std::isfinite(loss) && std::isfinite(grad_norm));
}

step_result trainer::train_step() {
  MERAK_CHECK(!done(), "train_step past --steps");
  using clock = std::chrono::steady_clock;
  auto secs = [](clock::time_point a, clock::time_point b) {
    return std::chrono::duration<double>(b - a).count();
  };
  auto t0 = clock::now();
  store_.zero_grads();
  batch b = corpus_->train_batch(opts_.seed, step_, opts_.batch);
  std::vector<tensor> in;
  in.push_back(std::move(b.tokens));
  in.push_back(std::move(b.targets));
  step_result r;
  auto t1 = clock::now();
  exec_->reset_activation_peak();
  r.loss = exec_->forward(0, std::move(in)).loss;
  auto t2 = clock::now();
  exec_->backward(0, {});
  auto t3 = clock::now();
  r.grad_norm = global_grad_norm(store_.all());
  r.lr = schedule_.at(step_);
  r.skipped = skip_update(opts_, r.loss, r.grad_norm);
  if (!r.skipped) opt_->step(r.lr, clip_factor(r.grad_norm, opts_.grad_clip), false);
  ++step_;
  r.step = step_;
  auto t4 = clock::now();
  r.forward_s = secs(t1, t2);
  r.backward_s = secs(t2, t3);
  r.optimizer_s = secs(t3, t4);
  r.step_s = secs(t0, t4);
  r.tokens_per_s = double(opts_.batch) * opts_.model.max_seq / r.step_s;
  return r;
}

double trainer::validation_loss() {
  int64_t nb = std::min<int64_t>(opts_.eval_batches, corpus_->val_batches(opts_.batch));
  double sum = 0;
  for (int64_t i = 0; i < nb; ++i) {
    batch b = corpus_->val_batch(i, opts_.batch);
    std::vector<tensor> in;
    in.push_back(std::move(b.tokens));
    in.push_back(std::move(b.targets));
    sum += exec_->evaluate(std::move(in));
  }
  return sum / double(nb);
}

std::vector<std::pair<std::string, double>> trainer::step_metrics() const {
  int64_t params = 0, grads = 0, moments = 0;
  for (auto& p : store_.all()) {
    params += p->value.bytes();
    grads += p->grad.bytes();
  }
  for (auto& m : opt_->first_moments()) moments += m.bytes();
  for (auto& v : opt_->second_moments()) moments += v.bytes();
  return {{"memory_bytes/parameters", double(params)},
          {"memory_bytes/gradients", double(grads)},
          {"memory_bytes/gradients_peak", double(grads)},
          {"memory_bytes/optimizer", double(moments)},
          {"memory_bytes/activations_peak", double(exec_->activation_peak())}};
}

std::string trainer::describe() const {
  if (opts_.where.type != device::kind::cpu)
    return fmt::format("model {} ({:.2f}M parameters), batch {}, on {}", opts_.model.str(),
                       double(graph_.parameter_count()) * 1e-6, opts_.batch, opts_.where.str());
  return fmt::format("model {} ({:.2f}M parameters), batch {}, {} threads, gemm {}",
                     opts_.model.str(), double(graph_.parameter_count()) * 1e-6, opts_.batch,
                     compute_threads(), gemm_backend_name(current_gemm_backend()));
}

std::string trainer::save() {
  if (opts_.save_dir.empty()) fail("no --save directory given");
  return save_checkpoint(opts_.save_dir, step_, store_, *opt_, metadata());
}

}  // namespace merak::model
