#pragma once
// The GPT-2 family, built through the public layer API (layers.hpp):
// token + position embedding, L pre-LN blocks of causal self-attention and a
// GELU MLP, a final layer norm and an LM head tied to the token embedding
// (or, with tied_head = false, a weight of its own, "lm_head.weight": the
// token embedding's gradient is then non-zero only on the rows of the
// batch's tokens, which is what the sparse gradient codecs exploit).

#include <string>

#include "model/graph.hpp"

namespace merak::model {

struct gpt_config {
  int vocab = 256;    // V (byte-level by default)
  int max_seq = 256;  // position table size; T <= max_seq
  int layers = 6;     // L
  int dim = 384;      // C
  int heads = 6;      // NH
  bool tied_head = true;  // LM head shares "wte"; false: its own (V, C) weight

  // Throws merak::error naming the field when the shape is inconsistent.
  void validate() const;
  std::string str() const;  // "L=6 C=384 NH=6 V=256 T=256"
  bool operator==(const gpt_config&) const = default;
};

// Graph inputs are "tokens" and "targets" (B, T) i32; the loss value is the
// per-token cross-entropy (B, T).
graph build_gpt(const gpt_config& cfg);

}  // namespace merak::model
