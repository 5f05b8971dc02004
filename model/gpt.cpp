#include "model/gpt.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "core/error.hpp"
#include "model/layers.hpp"
#include "model/llama.hpp"

namespace merak::model {

namespace {

// Bounds on the model's shape, checked before anything is allocated: a
// transformer far past any trained one (the graph holds a few dozen values
// per layer), and parameters whose float weights, gradients and Adam moments
// (16 bytes each) would need more than 16 TiB.
constexpr int kmost_layers = 65536;
constexpr double kmost_parameters = 0x1p40;

// The parameter count of the shape, in double (no overflow): per layer the
// attention's 4 C x C projections and an MLP of 8 C^2 (GPT) or 3 C x F
// (SwiGLU), plus the token and position tables.
double approximate_parameters(const gpt_config& m) {
  const double c = m.dim;
  const double mlp = std::max(8 * c * c, 3 * c * double(m.ffn_hidden));
  return double(m.layers) * (4 * c * c + mlp + 13 * c) + (double(m.padded_vocab()) + m.max_seq) * c;
}

}  // namespace

int gpt_config::padded_vocab() const {
  const int64_t d = std::max(1, vocab_divisible_by);
  return int((int64_t(vocab) + d - 1) / d * d);
}

void gpt_config::validate() const {
  if (vocab < 2) fail("--vocab must be at least 2 (got {})", vocab);
  if (vocab_divisible_by < 1 || vocab_divisible_by > (1 << 20))
    fail("--make-vocab-size-divisible-by must be from 1 to 2^20 (got {})", vocab_divisible_by);
  if (int64_t(vocab) + vocab_divisible_by > (int64_t(1) << 31) - 1)
    fail("--vocab {} padded to a multiple of {} does not fit 32-bit token ids", vocab,
         vocab_divisible_by);
  if (max_seq < 1) fail("--seq must be at least 1 (got {})", max_seq);
  if (build) return;  // the rest is the custom model's business
  if (layers < 1) fail("--layers must be at least 1 (got {})", layers);
  if (dim < 1) fail("--dim must be at least 1 (got {})", dim);
  if (heads < 1) fail("--heads must be at least 1 (got {})", heads);
  if (dim % heads != 0) fail("--heads ({}) must divide --dim ({})", heads, dim);
  if (layers > kmost_layers) fail("--layers must be from 1 to {} (got {})", kmost_layers, layers);
  if (const double n = approximate_parameters(*this); n > kmost_parameters)
    fail(
        "the model has about {:.3g} parameters (--layers {} --dim {} --vocab {}), more than "
        "merak takes (2^40, 16 TiB of weights, gradients and optimizer state)",
        n, layers, dim, vocab);
  if (family == model_family::llama) validate_llama(*this);
}

std::string gpt_config::str() const {
  return fmt::format(
      "{}L={} C={} NH={} V={}{} T={}{}{}{}",
      family == model_family::llama && !build ? llama_shape_str(*this) + " " : "", layers, dim,
      heads, vocab, padded_vocab() != vocab ? fmt::format(" (padded {})", padded_vocab()) : "",
      max_seq, tied_head ? "" : " untied-head", build ? " custom model" : "",
      activations == dtype::bf16 ? fmt::format(" bf16 (GEMMs: {})", bf16_support()) : "");
}

bool gpt_config::operator==(const gpt_config& config) const {
  return vocab == config.vocab && padded_vocab() == config.padded_vocab() && max_seq == config.max_seq && layers == config.layers &&
         dim == config.dim && heads == config.heads && tied_head == config.tied_head &&
         bool(build) == bool(config.build) && family == config.family &&
         (family != model_family::llama ||
          (query_groups == config.query_groups && ffn_hidden == config.ffn_hidden &&
           rotary_base == config.rotary_base && norm_epsilon == config.norm_epsilon));
}

model_family parse_model_family(const std::string& s) {
  if (s == "gpt") return model_family::gpt;
  if (s == "llama") return model_family::llama;
  fail("--model must be gpt or llama (got '{}')", s);
}

const char* model_family_name(model_family family) {
  return family == model_family::llama ? "llama" : "gpt";
}

dtype parse_precision(const std::string& s) {
  if (s == "fp32") return dtype::f32;
  if (s == "bf16") return dtype::bf16;
  fail("--precision must be fp32 or bf16 (got '{}')", s);
}

const char* precision_name(dtype activations) {
  return activations == dtype::bf16 ? "bf16" : "fp32";
}

graph build_model(const gpt_config& cfg) {
  if (!cfg.build) return cfg.family == model_family::llama ? build_llama(cfg) : build_gpt(cfg);
  cfg.validate();
  graph g = cfg.build(cfg);
  const char* want[2] = {"tokens", "targets"};
  if (g.inputs().size() != 2)
    fail("custom model: the graph has {} inputs; training feeds two, \"tokens\" and \"targets\"",
         g.inputs().size());
  for (int i = 0; i < 2; ++i) {
    const auto& v = g.values()[size_t(g.inputs()[i])];
    if (v.name != want[i] || v.type != dtype::i32)
      fail("custom model: input {} is \"{}\" ({}); it must be \"{}\" (i32)", i, v.name,
           dtype_name(v.type), want[i]);
  }
  if (g.loss() < 0) fail("custom model: the graph sets no loss (graph::set_loss)");
  if (g.activation_type() != cfg.activations)
    fail(
        "custom model: the graph's activations are {} but the run asks for {} "
        "(call graph::set_activation_type(cfg.activations) before adding layers)",
        dtype_name(g.activation_type()), dtype_name(cfg.activations));
  return g;
}

graph build_gpt(const gpt_config& cfg) {
  cfg.validate();
  namespace ly = layers;
  const int C = cfg.dim, V = cfg.padded_vocab(), T = cfg.max_seq;
  // GPT-2 scales the residual projections by 1/sqrt(2L) at initialisation.
  const float proj_std = 0.02f / std::sqrt(2.0f * cfg.layers);
  graph g;
  g.set_activation_type(cfg.activations);
  int tokens = g.add_input("tokens", {}, dtype::i32);
  int targets = g.add_input("targets", {}, dtype::i32);
  int x = ly::embedding(g, "embed", tokens, V, T, C, "wte", "wpe", cfg.vocab);
  for (int l = 0; l < cfg.layers; ++l) {
    auto p = fmt::format("h{}.", l);
    int h = ly::layernorm(g, p + "ln1", x, C);
    h = ly::linear(g, p + "attn.qkv", h, C, 3 * C, tp_split::column);
    h = ly::causal_attention(g, p + "attn.core", h, C, cfg.heads, T);
    h = ly::linear(g, p + "attn.proj", h, C, C, tp_split::row, proj_std);
    x = ly::residual(g, p + "res1", x, h, C);
    h = ly::layernorm(g, p + "ln2", x, C);
    h = ly::linear(g, p + "mlp.fc", h, C, 4 * C, tp_split::column);
    h = ly::gelu(g, p + "mlp.gelu", h, 4 * C);
    h = ly::linear(g, p + "mlp.proj", h, 4 * C, C, tp_split::row, proj_std);
    x = ly::residual(g, p + "res2", x, h, C);
  }
  x = ly::layernorm(g, "ln_f", x, C);
  int logits = ly::lm_head(g, "lm_head", x, C, V, cfg.tied_head ? "wte" : "lm_head.weight");
  g.set_loss(ly::cross_entropy(g, "loss", logits, targets, V, cfg.vocab));
  return g;
}

}  // namespace merak::model
