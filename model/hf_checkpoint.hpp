#pragma once
// Hugging Face checkpoints of GPT2LMHeadModel and LlamaForCausalLM: a
// directory holding config.json and either model.safetensors or
// model.safetensors.index.json with the shards its weight_map names. What
// maps to what (names, transposes, fused projections, dtypes, limits):
// docs/hf-checkpoints.md.
//
// Pure functions of files and tensors; callable from any thread.

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "model/gpt.hpp"
#include "model/tensor.hpp"

namespace merak::model {

// How one merak parameter is stored in a Hugging Face file: the HF tensors
// (one, or the row blocks that merak fuses, in order: [q; k; v] or
// [gate; up]), each (out, in) like merak's, or (in, out) where `transpose`
// (GPT-2's Conv1D).
struct hf_mapping {
  std::string merak;  // merak's parameter name
  shape_t merak_shape;
  std::vector<std::string> hf;  // HF tensor names, without GPT-2's "transformer." prefix
  std::vector<shape_t> hf_shapes;
  bool transpose = false;
};

// The mappings of every parameter of `config`'s model (a built-in family),
// in Hugging Face's order. `hf_tied`: the HF model ties its output layer to
// the token embedding (tie_word_embeddings); for Llama, whose merak model is
// always untied, the output layer then maps to "model.embed_tokens.weight".
std::vector<hf_mapping> hf_mappings(const gpt_config& config, bool hf_tied);

// What a config.json says: merak's config and the HF tying.
struct hf_config {
  gpt_config model;
  bool tied = true;
  std::string architecture;  // "GPT2LMHeadModel" or "LlamaForCausalLM"
};

// Parses config.json's text. Throws merak::error naming `where` (the file)
// and the field: not JSON, an unknown architecture, a missing field, a field
// of the wrong type or out of range, or a feature merak's models lack
// (another activation, rope scaling, biases in Llama, ...).
hf_config parse_hf_config(const std::string& text, const std::string& where);

// Parses model.safetensors.index.json's text: its weight_map, tensor name ->
// shard file name (a plain file name, no directories). Throws merak::error
// naming `where` and the field when it is malformed.
std::map<std::string, std::string> parse_hf_index(const std::string& text,
                                                  const std::string& where);

// A Hugging Face checkpoint in merak's names and shapes, F32.
struct hf_model {
  hf_config config;
  std::map<std::string, tensor> parameters;
};

// Reads the checkpoint in `dir` (F32, BF16 and F16 tensors, widened to F32).
// Buffers that are not parameters (GPT-2's attn.bias / attn.masked_bias,
// Llama's rotary_emb.inv_freq) are ignored. Throws merak::error naming the
// file and the tensor or field: a missing or unreadable file, a shard the
// index names that is missing, a missing tensor, a shape other than the
// config's (expected and found), a tensor the model does not have.
hf_model read_hf_checkpoint(const std::string& dir);

struct hf_write_options {
  dtype type = dtype::f32;  // f32 or bf16 (rounded to nearest even)
  // Tensor bytes above which the weights are split into
  // model-0000K-of-0000N.safetensors files with an index.
  uint64_t max_shard_bytes = 5'000'000'000;
};

// Writes `config`'s model as a Hugging Face checkpoint into `dir` (which
// must exist): config.json and the safetensors file(s), each atomically.
// `parameter(name)` returns merak's F32 parameter `name`. Throws
// merak::error naming the parameter when its shape is not the config's, or
// the file on an I/O failure.
void write_hf_checkpoint(const std::string& dir, const gpt_config& config,
                         const std::function<tensor(const std::string&)>& parameter,
                         const hf_write_options& options = {});

}  // namespace merak::model
