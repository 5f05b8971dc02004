#pragma once
// Layer builders: each adds one node to a graph and returns its output value.
// This is the public API a user writes a single-device model with; the GPT
// family (gpt.hpp) is built through it. Sizes as in kernels.hpp.
// docs/layers.md describes the Llama-family layers (rmsnorm, rotary,
// grouped_query_attention, swiglu) and how they compose.

#include <string>

#include "model/graph.hpp"

namespace merak::model::layers {

// tokens (B,T) i32 -> (B,T,C): token embedding wte (V,C) plus learned
// position embedding wpe (max_T,C). Token ids must be below `valid` (0:
// V; the rows past it pad the vocabulary).
int embedding(graph& g, const std::string& name, int tokens, int V, int max_T, int C,
              const std::string& wte = "wte", const std::string& wpe = "wpe", int valid = 0);
// tokens (B,T) i32 -> (B,T,C): token embedding wte (V,C) alone, no
// position table (the Llama family, whose positions come from rotary).
int token_embedding(graph& g, const std::string& name, int tokens, int V, int C,
                    const std::string& wte = "wte", int valid = 0);
// (B,T,C) -> (B,T,C)
int layernorm(graph& g, const std::string& name, int x, int C);
// (B,T,C) -> (B,T,OC), Y = X W^T + b. `tp` says how tensor parallelism may
// split it (column or row). `stddev` is the initial weight scale. bias =
// false: Y = X W^T, no bias parameter (Megatron's --disable-bias-linear).
int linear(graph& g, const std::string& name, int x, int C, int OC, tp_split tp,
           float stddev = 0.02f, bool bias = true);
// qkv (B,T,3C) -> (B,T,C), causal, NH heads.
int causal_attention(graph& g, const std::string& name, int qkv, int C, int NH, int max_T);
// qkv (B,T,C+2*groups*C/NH) = [Q (NH heads) | K (groups heads) | V (groups
// heads)] -> (B,T,C), causal; query head h reads K/V head h / (NH/groups).
// groups must divide NH (1: multi-query). groups == NH is causal_attention.
// Tensor parallelism splits the query heads; the K/V heads are split too
// when tp divides groups, else each shard holds the one its query heads
// read (groups must then divide tp).
int grouped_query_attention(graph& g, const std::string& name, int qkv, int C, int NH, int groups,
                            int max_T);
// (B,T,C) -> (B,T,C), RMSNorm as Llama and Megatron define it: Y = X /
// sqrt(mean(X^2) + eps) * w, weight only, statistics in float.
int rmsnorm(graph& g, const std::string& name, int x, int C, float eps = 1e-5f);
// Rotary position embedding of a fused qkv laid out as for
// grouped_query_attention ((B,T,(NH+2*groups)*head_size) -> same shape):
// Q and K rotated in Hugging Face's rotate-half layout, base theta, token t
// at position position_offset + t (nonzero where a sequence is split and
// this piece does not start it); V copied. head_size must be even.
int rotary(graph& g, const std::string& name, int qkv, int NH, int groups, int head_size,
           float theta = 10000.0f, int position_offset = 0);
// [gate | up] (B,T,2F), the output of one fused projection (a linear of
// 2F outputs) -> (B,T,F) = silu(gate) * up.
int swiglu(graph& g, const std::string& name, int x, int F);
int gelu(graph& g, const std::string& name, int x, int C);
int residual(graph& g, const std::string& name, int a, int b, int C);
// (B,T,C) -> logits (B,T,V) = X W^T with W the (V,C) parameter `tied_weight`
// (created here if no earlier node made it). A name no other node uses (the
// GPT family's "lm_head.weight") gives an untied output layer.
int lm_head(graph& g, const std::string& name, int x, int C, int V, const std::string& tied_weight);
// Tensor-parallel helpers (inserted by the TP rewrite; see tp_comm):
// identity nodes the executor all-reduces around, and Y = X + b for the bias
// of a row-parallel linear (added once, after the sum of the partial outputs).
int tp_copy(graph& g, const std::string& name, int x, int C);
int tp_reduce(graph& g, const std::string& name, int x, int C);
// A tp_reduce of a value of element type `type` (a float one in a bf16 graph).
int tp_reduce(graph& g, const std::string& name, int x, int C, dtype type);
int bias_add(graph& g, const std::string& name, int x, int C, const param_spec& bias);
// Sequence parallelism (tp_comm::sp_*): shard `rank` of `tp`. sp_enter and
// sp_reduce take a whole (B, T, C) value to the shard's slice (B, T/tp, C);
// sp_gather and sp_exit take the slice to the whole value.
int sp_node(graph& g, const std::string& name, int x, int C, tp_comm comm, int tp, int rank);
// Vocabulary parallelism (Megatron's; inserted by the TP rewrite): shard
// `rank` of `tp` holds rows [first, first + V / tp) of the token embedding
// and the output layer. embedding_shard: tokens (B,T) -> (B,T,C), the rows
// of the tokens this shard holds, zero for the others, plus the position
// table `wpe` when add_positions (one shard adds it; every shard with a
// wpe accumulates its gradient, the same on each): a tp_reduce after it
// sums the shards. `wte` is the shard's spec; ids are checked against
// [0, vocab).
int embedding_shard(graph& g, const std::string& name, int tokens, int vocab,
                    const param_spec& wte, const param_spec* wpe, int first, bool add_positions);
// logits (B,T,V/tp) of ids [first, first + V/tp), targets (B,T) -> the
// per-token loss (B,T), whole on every shard: the shard's log-sum-exp and
// target logit (a (B,T,2 tp) float value), their sum over the shards, the
// loss from the sums. Its backward needs no communication. Ids from
// `valid` on are padding, left out.
int vocab_parallel_cross_entropy(graph& g, const std::string& name, int logits, int targets,
                                 int first, int valid, int tp, int rank);
// logits (B,T,V), targets (B,T) i32 -> per-token loss (B,T), the softmax
// over the first `valid` logits (0: all V; the rest pad the vocabulary to
// --make-vocab-size-divisible-by and are left out). Targets are in
// [0, valid).
int cross_entropy(graph& g, const std::string& name, int logits, int targets, int V,
                  int valid = 0);

}  // namespace merak::model::layers
