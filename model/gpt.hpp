#pragma once
// The GPT-2 family, built through the public layer API (layers.hpp):
// token + position embedding, L pre-LN blocks of causal self-attention and a
// GELU MLP, a final layer norm and an LM head tied to the token embedding
// (or, with tied_head = false, a weight of its own, "lm_head.weight": the
// token embedding's gradient is then non-zero only on the rows of the
// batch's tokens, which is what the sparse gradient codecs exploit).

#include <functional>
#include <string>

#include "model/graph.hpp"

namespace merak::model {

// Which graph build_model makes: GPT-2 (build_gpt) or Llama (build_llama,
// llama.hpp).
enum class model_family { gpt, llama };

struct gpt_config {
  model_family family = model_family::gpt;
  int vocab = 256;        // V (byte-level by default): token ids are in [0, V)
  // --make-vocab-size-divisible-by: the embedding and output layer have
  // padded_vocab() rows, V rounded up to a multiple of this (Megatron's
  // padding, for even tensor-parallel splits and aligned GEMMs). The padded
  // ids are never tokens and the loss leaves their logits out, so the
  // padding changes no result.
  int vocab_divisible_by = 128;
  int max_seq = 256;      // position table size; T <= max_seq
  int layers = 6;         // L
  int dim = 384;          // C
  int heads = 6;          // NH
  bool tied_head = true;  // LM head shares "wte"; false: its own (V, C) weight
  // The Llama family's shape (ignored by GPT-2), Megatron's defaults.
  int query_groups = 0;          // --num-query-groups; 0: one per head (no grouping)
  int ffn_hidden = 0;            // F, --ffn-hidden-size; 0: llama_ffn_hidden(C)
  float rotary_base = 10000.0f;  // --rotary-base
  float norm_epsilon = 1e-5f;    // --norm-epsilon
  // Element type of the activations (--precision): f32, or bf16 for mixed
  // precision (float master weights, optimizer state, statistics and loss).
  // Not part of the model's identity: checkpoints hold float weights, so a
  // run of either precision resumes from the other's checkpoint.
  dtype activations = dtype::f32;
  // A model of your own instead of GPT-2, written for one device with the
  // layer API (layers.hpp): it builds the graph from this config. vocab and
  // max_seq are the data's (token ids in [0, vocab), max_seq positions); the
  // other fields are the model's to use as it likes (the planner reads dim as
  // the width of the activations between blocks). The graph's inputs must be
  // "tokens" and "targets" (i32, one per position), it must set a loss, and
  // it sets graph::set_activation_type(activations) before adding layers.
  // Empty: build_gpt. merak partitions, shards and schedules either alike.
  std::function<graph(const gpt_config&)> build = {};

  int padded_vocab() const;
  // Throws merak::error naming the field when the shape is inconsistent.
  void validate() const;
  // "L=6 C=384 NH=6 V=256 T=256" (+ " custom model", + " bf16 (GEMMs: AMX)")
  std::string str() const;
  // The shape fields, and whether both are custom (functions do not compare).
  bool operator==(const gpt_config& config) const;
};

// --model: "gpt" or "llama"; throws merak::error naming the flag otherwise.
// model_family_name is the inverse.
model_family parse_model_family(const std::string& s);
const char* model_family_name(model_family family);

// --precision: "fp32" -> dtype::f32, "bf16" -> dtype::bf16; throws
// merak::error naming the flag otherwise. precision_name is the inverse.
dtype parse_precision(const std::string& s);
const char* precision_name(dtype activations);

// Graph inputs are "tokens" and "targets" (B, T) i32; the loss value is the
// per-token cross-entropy (B, T).
graph build_gpt(const gpt_config& cfg);

// cfg.build(cfg) when set, checked for the inputs and loss that training
// feeds and reads (errors name the problem); else build_gpt(cfg) or
// build_llama(cfg) by cfg.family.
graph build_model(const gpt_config& cfg);

}  // namespace merak::model
