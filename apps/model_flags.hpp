#pragma once
// The model family's flags, shared by the commands that take a model shape
// (train, plan): --model, the Llama family's shape flags and Megatron's
// individual switches, checked against the family.

#include <string>

#include "model/gpt.hpp"

namespace CLI {
class App;
}

namespace merak::apps {

struct model_family_flags {
  std::string model = "gpt";
  std::string normalization;            // "", LayerNorm or RMSNorm
  std::string position_embedding_type;  // "", learned_absolute or rope
  bool swiglu = false;
  bool disable_bias_linear = false;
  bool group_query_attention = false;
  int max_position_embeddings = 0;  // 0: not given
  double rotary_base = 0;           // 0: not given (10000)
  double norm_epsilon = 0;          // 0: not given (1e-5)
};

// --model, --make-vocab-size-divisible-by, --num-query-groups, --ffn-hidden-size, --max-position-embeddings,
// --rotary-base, --norm-epsilon, --normalization, --position-embedding-type,
// --swiglu, --disable-bias-linear, --group-query-attention; the shape flags
// write into `model`, the rest into `flags`.
void add_model_family_flags(CLI::App* command, model_family_flags* flags, model::gpt_config* model);

// Sets model's family and Llama fields from the flags; a switch that
// contradicts the family, or a bad value, fails naming the flag.
void apply_model_family(const model_family_flags& flags, model::gpt_config& model);

}  // namespace merak::apps
