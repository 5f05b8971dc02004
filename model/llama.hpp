#pragma once
// The Llama family, built through the public layer API (layers.hpp; the
// layers' contracts in docs/layers.md): a token embedding without a
// position table, L pre-norm blocks of
//   RMSNorm -> fused [Q|K|V] linear (groups K/V heads) -> rotary ->
//   grouped-query attention -> output linear -> residual ->
//   RMSNorm -> fused [gate|up] linear -> SwiGLU -> down linear -> residual,
// a final RMSNorm and an untied output layer, every linear without bias.
// Parameter names follow Megatron-core's GPT model with its Llama spec
// ("embedding.word_embeddings.weight", "decoder.layers.{l}.self_attention.
// linear_qkv.weight", "output_layer.weight", ...).

#include "model/gpt.hpp"

namespace merak::model {

// Megatron's default --ffn-hidden-size under --swiglu: 8C/3 rounded down to
// a multiple of 64, and at least 64.
int llama_ffn_hidden(int C);

// The groups and F the graph uses: cfg's, or their defaults where 0.
int llama_query_groups(const gpt_config& cfg);
int llama_ffn_size(const gpt_config& cfg);

// Throws merak::error naming the flag when the Llama-only fields are
// inconsistent (groups must divide the heads, the head size must be even).
void validate_llama(const gpt_config& cfg);

// "llama G=2 F=64" (+ " rope=500000" / " eps=1e-06" where not the default).
std::string llama_shape_str(const gpt_config& cfg);

// Graph inputs are "tokens" and "targets" (B, T) i32; the loss value is the
// per-token cross-entropy (B, T). cfg.tied_head is ignored (always untied).
graph build_llama(const gpt_config& cfg);

}  // namespace merak::model
