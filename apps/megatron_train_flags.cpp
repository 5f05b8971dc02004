#include "apps/megatron_train_flags.hpp"

#include <cmath>

#include <CLI/CLI.hpp>

#include "apps/flag_checks.hpp"
#include "apps/tokenizer_flags.hpp"
#include "core/error.hpp"
#include "model/trainer.hpp"

namespace merak::apps {

void add_megatron_train_flags(CLI::App* c, megatron_train_flags* f, model::train_options* o) {
  c->add_option("--lr-decay-style", f->lr_decay_style,
                "Megatron's: cosine (default), linear, or constant after warm-up");
  integer_in(c->add_option("--lr-decay-iters", f->lr_decay_iters,
                           "Megatron's: the step where the decay reaches --min-lr (default: "
                           "--train-iters)"),
             1, INT64_MAX);
  number_in(c->add_option("--lr-warmup-fraction", f->lr_warmup_fraction,
                          "Megatron's: warm-up steps as a share of --lr-decay-iters"),
            0, 1, false)
      ->excludes("--warmup");
  number_in(c->add_option("--lr-warmup-init", o->warmup_init,
                          "Megatron's: the learning rate warm-up starts from (step 0)")
                ->capture_default_str(),
            0, 1e30, false);
  number_in(c->add_option("--adam-beta1", o->adam_beta1, "AdamW beta1")->capture_default_str(), 0,
            1, false);
  number_in(c->add_option("--adam-beta2", o->adam_beta2, "AdamW beta2")->capture_default_str(), 0,
            1, false);
  number_in(c->add_option("--adam-eps", o->adam_eps, "AdamW epsilon")->capture_default_str(), 0,
            1, true);
  auto* bf16 = c->add_flag("--bf16", f->bf16, "Megatron's name for --precision bf16");
  c->add_flag("--fp16", f->fp16, "Refused: merak trains fp32 or bf16 (--bf16)")->excludes(bf16);
  integer_in(c->add_option("--log-interval", f->log_interval,
                           "Steps between progress lines (default: --train-iters / 20)"),
             1, INT64_MAX);
  c->add_option("--attention-dropout", f->attention_dropout,
                "Accepted as 0 (merak trains without dropout; Megatron's default is 0.1)");
  c->add_option("--hidden-dropout", f->hidden_dropout,
                "Accepted as 0 (merak trains without dropout; Megatron's default is 0.1)");
  add_tokenizer_flags(*c, f->tokenizer);
  // Given or not: a run's config.toml names them only when given.
  c->get_option("--tokenizer-type")->default_str("");
  for (const char* name : {"--tokenizer-type", "--vocab-file", "--merge-file", "--tokenizer-model"})
    c->get_option(name)->each([f](const std::string&) { f->tokenizer_given = true; });
  c->add_option("--distributed-backend", f->distributed_backend,
                "Accepted: merak picks its transports (shared memory, UCX, NCCL) itself");
  c->add_option("--transformer-impl", f->transformer_impl, "Accepted: merak's own kernels run");
  for (const char* name :
       {"--use-flash-attn", "--use-mcore-models", "--no-masked-softmax-fusion",
        "--no-bias-gelu-fusion", "--no-bias-dropout-fusion", "--no-gradient-accumulation-fusion",
        "--attention-softmax-in-fp32", "--accumulate-allreduce-grads-in-fp32"})
    c->add_flag(name, f->accepted, "Accepted: a kernel choice merak makes itself");
}

void apply_megatron_train_flags(const megatron_train_flags& f, model::train_options& o,
                                std::string& precision, bool vocab_given) {
  if (f.fp16) fail("--fp16: merak trains in fp32 or bf16 (--bf16), not fp16");
  if (f.bf16) {
    if (precision != "fp32" && precision != "bf16")
      fail("--bf16 contradicts --precision {}", precision);
    precision = "bf16";
  }
  for (auto [name, p] : {std::pair{"--attention-dropout", f.attention_dropout},
                         std::pair{"--hidden-dropout", f.hidden_dropout}})
    if (p != 0)
      fail("{} {}: merak trains without dropout (pass 0, or leave the flag out)", name, p);
  if (!f.lr_decay_style.empty()) o.decay = model::parse_lr_decay(f.lr_decay_style);
  if (f.lr_decay_iters > 0) o.decay_steps = f.lr_decay_iters;
  if (f.lr_warmup_fraction >= 0) {
    const int64_t span = o.decay_steps >= 0 ? o.decay_steps : o.steps;
    o.warmup = int64_t(std::llround(f.lr_warmup_fraction * double(span)));
  }
  if (f.tokenizer_given) {
    if (o.data_path.empty())
      fail(
          "--tokenizer-type and its files size the vocabulary of --data-path's token ids; --data "
          "reads bytes or words (--tokenizer)");
    const int64_t ids = model::text::make_tokenizer(f.tokenizer)->vocab_size();
    if (vocab_given && o.model.vocab < ids)
      fail("--vocab {} is smaller than --tokenizer-type {}'s {} ids", o.model.vocab,
           f.tokenizer.type, ids);
    if (!vocab_given) o.model.vocab = int(ids);
  }
}

}  // namespace merak::apps
