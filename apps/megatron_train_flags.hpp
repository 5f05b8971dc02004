#pragma once
// Megatron-LM's training flags beyond the model, layout and memory ones, so
// that a pretrain_gpt.py script's arguments run under `merak train`:
//   mapped      --lr-decay-style, --lr-decay-iters, --lr-warmup-fraction,
//               --adam-beta1/2, --adam-eps, --bf16, --log-interval, and the
//               tokenizer flags (--data-path's vocabulary size)
//   refused     --fp16, non-zero --attention-dropout / --hidden-dropout
//   accepted    kernel and backend choices merak makes itself
//               (--use-flash-attn, --distributed-backend, fusion switches)
// (--lr-warmup-iters and --eval-iters are aliases on train's own flags.)

#include <cstdint>
#include <string>

#include "model/text/tokenizer.hpp"

namespace CLI {
class App;
}

namespace merak::model {
struct train_options;
}

namespace merak::apps {

struct megatron_train_flags {
  std::string lr_decay_style;       // "": not given
  int64_t lr_decay_iters = -1;      // < 0: not given
  double lr_warmup_fraction = -1;   // < 0: not given
  bool bf16 = false, fp16 = false;
  int64_t log_interval = 0;         // 0: not given
  double attention_dropout = 0, hidden_dropout = 0;
  model::text::tokenizer_options tokenizer;
  bool tokenizer_given = false;     // any of the tokenizer flags
  std::string distributed_backend;  // accepted
  std::string transformer_impl;     // accepted
  bool accepted = false;            // the no-op switches write here
};

// Adds the flags above to `command` (the optimizer's write into `options`).
void add_megatron_train_flags(CLI::App* command, megatron_train_flags* flags,
                              model::train_options* options);

// Applies the mapped flags to `options` and `precision`; `vocab_given`:
// --vocab was on the command line (it must then hold the tokenizer's ids).
// Fails naming the flag for a refused or contradictory one.
void apply_megatron_train_flags(const megatron_train_flags& flags, model::train_options& options,
                                std::string& precision, bool vocab_given);

}  // namespace merak::apps
