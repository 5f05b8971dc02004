#include "model/llama.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "core/error.hpp"
#include "model/layers.hpp"

namespace merak::model {

int llama_ffn_hidden(int C) {
  return std::max(64, (8 * C / 3) / 64 * 64);
}

int llama_query_groups(const gpt_config& cfg) {
  return cfg.query_groups > 0 ? cfg.query_groups : cfg.heads;
}

int llama_ffn_size(const gpt_config& cfg) {
  return cfg.ffn_hidden > 0 ? cfg.ffn_hidden : llama_ffn_hidden(cfg.dim);
}

void validate_llama(const gpt_config& cfg) {
  if (cfg.query_groups < 0)
    fail("--num-query-groups must be at least 1 (got {})", cfg.query_groups);
  if (cfg.heads % llama_query_groups(cfg) != 0)
    fail("--num-query-groups ({}) must divide --num-attention-heads ({})", llama_query_groups(cfg),
         cfg.heads);
  if ((cfg.dim / cfg.heads) % 2 != 0)
    fail("rotary needs an even head size: --hidden-size / --num-attention-heads is {}",
         cfg.dim / cfg.heads);
  if (cfg.ffn_hidden < 0) fail("--ffn-hidden-size must be at least 1 (got {})", cfg.ffn_hidden);
  if (!(cfg.rotary_base > 0)) fail("--rotary-base must be positive (got {})", cfg.rotary_base);
  if (!(cfg.norm_epsilon > 0)) fail("--norm-epsilon must be positive (got {})", cfg.norm_epsilon);
}

std::string llama_shape_str(const gpt_config& cfg) {
  std::string s = fmt::format("llama G={} F={}", llama_query_groups(cfg), llama_ffn_size(cfg));
  if (cfg.rotary_base != 10000.0f) s += fmt::format(" rope={}", cfg.rotary_base);
  if (cfg.norm_epsilon != 1e-5f) s += fmt::format(" eps={}", cfg.norm_epsilon);
  return s;
}

graph build_llama(const gpt_config& cfg) {
  cfg.validate();
  namespace ly = layers;
  const int C = cfg.dim, V = cfg.padded_vocab(), T = cfg.max_seq, NH = cfg.heads;
  const int groups = llama_query_groups(cfg), F = llama_ffn_size(cfg), head_size = C / NH;
  const int qkv_width = C + 2 * groups * head_size;  // [Q (NH heads) | K | V (groups heads each)]
  const float eps = cfg.norm_epsilon;
  const float proj_std = 0.02f / std::sqrt(2.0f * cfg.layers);
  graph g;
  g.set_activation_type(cfg.activations);
  int tokens = g.add_input("tokens", {}, dtype::i32);
  int targets = g.add_input("targets", {}, dtype::i32);
  int x = ly::token_embedding(g, "embedding", tokens, V, C, "embedding.word_embeddings.weight",
                              cfg.vocab);
  for (int l = 0; l < cfg.layers; ++l) {
    const auto p = fmt::format("decoder.layers.{}.", l);
    int h = ly::rmsnorm(g, p + "input_layernorm", x, C, eps);
    h = ly::linear(g, p + "self_attention.linear_qkv", h, C, qkv_width, tp_split::column, 0.02f,
                   false);
    h = ly::rotary(g, p + "self_attention.rotary", h, NH, groups, head_size, cfg.rotary_base);
    h = ly::grouped_query_attention(g, p + "self_attention.core", h, C, NH, groups, T);
    h = ly::linear(g, p + "self_attention.linear_proj", h, C, C, tp_split::row, proj_std, false);
    x = ly::residual(g, p + "res1", x, h, C);
    h = ly::rmsnorm(g, p + "pre_mlp_layernorm", x, C, eps);
    h = ly::linear(g, p + "mlp.linear_fc1", h, C, 2 * F, tp_split::column, 0.02f, false);
    h = ly::swiglu(g, p + "mlp.swiglu", h, F);
    h = ly::linear(g, p + "mlp.linear_fc2", h, F, C, tp_split::row, proj_std, false);
    x = ly::residual(g, p + "res2", x, h, C);
  }
  x = ly::rmsnorm(g, "decoder.final_layernorm", x, C, eps);
  int logits = ly::lm_head(g, "output_layer", x, C, V, "output_layer.weight");
  g.set_loss(ly::cross_entropy(g, "loss", logits, targets, V, cfg.vocab));
  return g;
}

}  // namespace merak::model
