// config.json and model.safetensors.index.json of Hugging Face checkpoints
// (model/hf_checkpoint.hpp; the fields in docs/hf-checkpoints.md).
#include <cmath>
#include <optional>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "model/hf_checkpoint.hpp"

namespace merak::model {
namespace {

using json = nlohmann::json;

constexpr const char* kGpt2 = "GPT2LMHeadModel";
constexpr const char* kLlama = "LlamaForCausalLM";
// Shape fields are bounded so that products of two stay far inside int64.
constexpr int64_t kmost_size = int64_t{1} << 30;

// ---- config.json ----------------------------------------------------------

// Field `key` of config.json's object `j`, or null when absent.
const json* field(const json& j, const char* key) {
  auto it = j.find(key);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

int size_field(const json& j, const char* key, const std::string& where,
               std::optional<int> fallback = std::nullopt) {
  const json* v = field(j, key);
  if (!v) {
    if (fallback) return *fallback;
    fail("{}: field '{}' is missing", where, key);
  }
  if (!v->is_number_integer() || v->get<int64_t>() < 1 || v->get<int64_t>() > kmost_size)
    fail("{}: field '{}' is {}, not a whole number from 1 to 2^30", where, key, v->dump());
  return v->get<int>();
}

double real_field(const json& j, const char* key, const std::string& where, double fallback) {
  const json* v = field(j, key);
  if (!v) return fallback;
  if (!v->is_number() || !(v->get<double>() > 0) || !std::isfinite(v->get<double>()))
    fail("{}: field '{}' is {}, not a positive number", where, key, v->dump());
  return v->get<double>();
}

bool bool_field(const json& j, const char* key, const std::string& where, bool fallback) {
  const json* v = field(j, key);
  if (!v) return fallback;
  if (!v->is_boolean()) fail("{}: field '{}' is {}, not true or false", where, key, v->dump());
  return v->get<bool>();
}

// A string field that must be one of `allowed` when present.
void expect_string(const json& j, const char* key, const std::string& where,
                   std::initializer_list<const char*> allowed, const char* why) {
  const json* v = field(j, key);
  if (!v) return;
  if (v->is_string())
    for (const char* a : allowed)
      if (*v == a) return;
  fail("{}: field '{}' is {}; merak's model has {} only ({})", where, key, v->dump(),
       *allowed.begin(), why);
}

std::string architecture_of(const json& j, const std::string& where) {
  if (const json* a = field(j, "architectures")) {
    if (!a->is_array() || a->empty() || !(*a)[0].is_string())
      fail("{}: field 'architectures' is {}, not a list of names", where, a->dump());
    const std::string name = (*a)[0].get<std::string>();
    if (name == kGpt2 || name == kLlama) return name;
    fail("{}: field 'architectures': unknown architecture '{}' (merak imports {} and {})", where,
         name, kGpt2, kLlama);
  }
  const json* type = field(j, "model_type");
  if (!type) fail("{}: fields 'architectures' and 'model_type' are both missing", where);
  if (*type == "gpt2") return kGpt2;
  if (*type == "llama") return kLlama;
  fail("{}: field 'model_type': unknown model type {} (merak imports gpt2 and llama)", where,
       type->dump());
}

void parse_gpt2_config(const json& j, const std::string& where, hf_config& out) {
  gpt_config& m = out.model;
  m.family = model_family::gpt;
  m.dim = size_field(j, "n_embd", where);
  m.layers = size_field(j, "n_layer", where);
  m.heads = size_field(j, "n_head", where);
  m.max_seq = size_field(j, "n_positions", where);
  m.vocab = size_field(j, "vocab_size", where);
  // merak's LayerNorm has GPT-2's epsilon built in.
  if (float(real_field(j, "layer_norm_epsilon", where, 1e-5)) != 1e-5f)
    fail("{}: field 'layer_norm_epsilon' is {}; merak's GPT-2 LayerNorm uses 1e-05", where,
         field(j, "layer_norm_epsilon")->dump());
  if (size_field(j, "n_inner", where, 4 * m.dim) != 4 * m.dim)
    fail("{}: field 'n_inner' is {}; merak's GPT-2 MLP is 4 x n_embd = {}", where,
         field(j, "n_inner")->dump(), 4 * m.dim);
  expect_string(j, "activation_function", where, {"gelu_new", "gelu_pytorch_tanh"},
                "GELU, tanh form");
  if (bool_field(j, "scale_attn_by_inverse_layer_idx", where, false))
    fail("{}: field 'scale_attn_by_inverse_layer_idx' is true; merak scales by 1/sqrt(head size)",
         where);
  if (!bool_field(j, "scale_attn_weights", where, true))
    fail("{}: field 'scale_attn_weights' is false; merak scales by 1/sqrt(head size)", where);
  out.tied = bool_field(j, "tie_word_embeddings", where, true);
  m.tied_head = out.tied;
}

void parse_llama_config(const json& j, const std::string& where, hf_config& out) {
  gpt_config& m = out.model;
  m.family = model_family::llama;
  m.dim = size_field(j, "hidden_size", where);
  m.ffn_hidden = size_field(j, "intermediate_size", where);
  m.heads = size_field(j, "num_attention_heads", where);
  m.query_groups = size_field(j, "num_key_value_heads", where, m.heads);
  m.layers = size_field(j, "num_hidden_layers", where);
  m.vocab = size_field(j, "vocab_size", where);
  m.max_seq = size_field(j, "max_position_embeddings", where);
  m.norm_epsilon = float(real_field(j, "rms_norm_eps", where, 1e-6));
  m.rotary_base = float(real_field(j, "rope_theta", where, 10000.0));
  if (m.heads > m.dim || m.dim % m.heads != 0)
    fail("{}: field 'num_attention_heads' ({}) must divide 'hidden_size' ({})", where, m.heads,
         m.dim);
  if (m.query_groups > m.heads || m.heads % m.query_groups != 0)
    fail("{}: field 'num_key_value_heads' ({}) must divide 'num_attention_heads' ({})", where,
         m.query_groups, m.heads);
  if (size_field(j, "head_dim", where, m.dim / m.heads) != m.dim / m.heads)
    fail("{}: field 'head_dim' is {}; merak's head size is hidden_size / num_attention_heads = {}",
         where, field(j, "head_dim")->dump(), m.dim / m.heads);
  expect_string(j, "hidden_act", where, {"silu"}, "SwiGLU");
  if (field(j, "rope_scaling"))
    fail("{}: field 'rope_scaling' is {}; merak's rotary embedding has no scaling", where,
         field(j, "rope_scaling")->dump());
  for (const char* bias : {"attention_bias", "mlp_bias"})
    if (bool_field(j, bias, where, false))
      fail("{}: field '{}' is true; merak's Llama linears have no bias", where, bias);
  out.tied = bool_field(j, "tie_word_embeddings", where, false);
  m.tied_head = false;  // merak's Llama output layer is its own weight
}

// `text` as a JSON object; fails naming `where` otherwise.
json parse_object(const std::string& text, const std::string& where) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    fail("{}: not valid JSON: {}", where, e.what());
  }
  if (!j.is_object()) fail("{}: not a JSON object", where);
  return j;
}

}  // namespace

hf_config parse_hf_config(const std::string& text, const std::string& where) {
  const json j = parse_object(text, where);
  hf_config out;
  out.architecture = architecture_of(j, where);
  if (out.architecture == kGpt2)
    parse_gpt2_config(j, where, out);
  else
    parse_llama_config(j, where, out);
  try {
    out.model.validate();
  } catch (const error& e) {
    fail("{}: the model it describes is not one merak builds: {}", where, e.what());
  }
  return out;
}

std::map<std::string, std::string> parse_hf_index(const std::string& text,
                                                  const std::string& where) {
  const json j = parse_object(text, where);
  auto map = j.find("weight_map");
  if (map == j.end()) fail("{}: field 'weight_map' is missing", where);
  if (!map->is_object() || map->empty())
    fail("{}: field 'weight_map' is not an object of tensor names", where);
  std::map<std::string, std::string> out;
  for (auto& [name, file] : map->items()) {
    if (!file.is_string())
      fail("{}: weight_map: tensor '{}' maps to {}, not a file name", where, name, file.dump());
    const std::string f = file.get<std::string>();
    if (f.empty() || f == "." || f == ".." || f.find('/') != std::string::npos ||
        f.find('\\') != std::string::npos || f.find('\0') != std::string::npos)
      fail(
          "{}: weight_map: tensor '{}' maps to '{}', not a file name in the checkpoint's directory",
          where, name, f);
    out[name] = f;
  }
  return out;
}

}  // namespace merak::model
