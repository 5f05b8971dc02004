#include "model/hf_checkpoint.hpp"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/files.hpp"
#include "model/bf16.hpp"
#include "model/llama.hpp"
#include "model/safetensors.hpp"

namespace merak::model {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr const char* kConfigFile = "config.json";
constexpr const char* kWeightsFile = "model.safetensors";
constexpr const char* kIndexFile = "model.safetensors.index.json";
constexpr const char* kGpt2 = "GPT2LMHeadModel";
constexpr const char* kLlama = "LlamaForCausalLM";
// GPT2LMHeadModel's state dict prefixes the body's tensors; files saved from
// GPT2Model (the published "gpt2" weights among them) do not.
constexpr const char* kGpt2Prefix = "transformer.";
// config.json and the index are small; anything larger is not one.
constexpr uint64_t kmost_json_bytes = 64u << 20;

// ---- files ----------------------------------------------------------------

std::string read_json_text(const std::string& path, const char* what) {
  std::error_code ec;
  if (!fs::exists(path, ec)) fail("{} '{}' does not exist", what, path);
  check_input_file(path, what);
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  if (!f) fail("cannot open {} '{}'", what, path);
  const uint64_t size = uint64_t(f.tellg());
  if (size > kmost_json_bytes)
    fail("'{}' is {} bytes, more than a {} holds (at most {})", path, size, what, kmost_json_bytes);
  f.seekg(0);
  std::string text(size, '\0');
  if (!f.read(text.data(), std::streamsize(size))) fail("cannot read {} '{}'", what, path);
  return text;
}

bool is_ignored_buffer(const std::string& name) {
  for (const char* suffix : {".attn.bias", ".attn.masked_bias", ".rotary_emb.inv_freq"})
    if (name.size() >= std::strlen(suffix) &&
        name.compare(name.size() - std::strlen(suffix), std::string::npos, suffix) == 0)
      return true;
  return false;
}

// The HF tensors of a checkpoint directory, read file by file on first use.
class hf_tensor_source {
 public:
  explicit hf_tensor_source(const std::string& dir) : dir_(dir) {
    const fs::path single = fs::path(dir) / kWeightsFile, index = fs::path(dir) / kIndexFile;
    std::error_code ec;
    if (fs::exists(single, ec)) {
      single_ = single.string();
      return;
    }
    if (!fs::exists(index, ec)) fail("'{}' holds neither {} nor {}", dir, kWeightsFile, kIndexFile);
    index_path_ = index.string();
    weight_map_ = parse_hf_index(read_json_text(index_path_, "safetensors index"),
                                 fmt::format("'{}'", index_path_));
    for (auto& [name, file] : weight_map_)
      if (!fs::is_regular_file(fs::path(dir) / file, ec))
        fail("'{}': weight_map places tensor '{}' in '{}', which does not exist in '{}'",
             index_path_, name, file, dir);
  }

  // Tensor `name` (F32) and the file it came from; null when the checkpoint
  // lacks it.
  const tensor* find(const std::string& name, std::string& file) {
    std::string path = single_;
    if (path.empty()) {
      auto it = weight_map_.find(name);
      if (it == weight_map_.end()) return nullptr;
      path = (fs::path(dir_) / it->second).string();
    }
    file = path;
    const safetensors_file& f = load(path);
    auto t = f.tensors.find(name);
    if (t == f.tensors.end()) {
      if (single_.empty())
        fail("'{}': tensor '{}' is missing (the weight_map of '{}' places it there)", path, name,
             index_path_);
      return nullptr;
    }
    return &t->second;
  }

  // Where a missing tensor was looked for: the file, or the index.
  const std::string& listing() const { return single_.empty() ? index_path_ : single_; }

  // Every tensor name the checkpoint holds, with its file.
  std::map<std::string, std::string> all_names() {
    if (single_.empty()) {
      std::map<std::string, std::string> out;
      for (auto& [name, file] : weight_map_) out[name] = (fs::path(dir_) / file).string();
      return out;
    }
    std::map<std::string, std::string> out;
    for (auto& [name, t] : load(single_).tensors) out[name] = single_;
    return out;
  }

 private:
  const safetensors_file& load(const std::string& path) {
    auto it = files_.find(path);
    if (it == files_.end())
      it = files_
               .emplace(path, read_safetensors(path, {.require_checksum = false,
                                                      .widen_to_f32 = true,
                                                      .skip = is_ignored_buffer}))
               .first;
    return it->second;
  }

  std::string dir_, single_, index_path_;
  std::map<std::string, std::string> weight_map_;
  std::map<std::string, safetensors_file> files_;
};

// ---- conversions ----------------------------------------------------------

// (rows, cols) -> (cols, rows), F32.
tensor transposed(const tensor& t) {
  const int64_t rows = t.dim(0), cols = t.dim(1);
  tensor out({cols, rows});
  const float* in = t.f32();
  float* o = out.f32();
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) o[c * rows + r] = in[r * cols + c];
  return out;
}

// The merak tensor of `m` from its HF tensors (row blocks stacked; rows
// past them, a padded vocabulary's, zero).
tensor merak_tensor(const hf_mapping& m, const std::vector<const tensor*>& parts) {
  if (m.transpose) return transposed(*parts[0]);
  tensor out = tensor::zeros(m.merak_shape);
  size_t offset = 0;
  for (const tensor* p : parts) {
    std::memcpy(reinterpret_cast<char*>(out.f32()) + offset, p->raw(), p->bytes());
    offset += p->bytes();
  }
  return out;
}

// `t` (F32) as `type`.
tensor stored_as(tensor t, dtype type) {
  if (type == dtype::f32) return t;
  tensor out(t.shape(), dtype::bf16);
  convert(out.bf16s(), t.f32(), t.numel());
  return out;
}

// The HF tensors of `m` from merak's tensor (F32, merak's shape; the rows
// of a padded vocabulary past Hugging Face's are left out).
std::vector<tensor> hf_tensors(const hf_mapping& m, const tensor& t) {
  std::vector<tensor> out;
  if (m.transpose) {
    out.push_back(transposed(t));
    return out;
  }
  size_t offset = 0;
  for (const shape_t& s : m.hf_shapes) {
    tensor part(s);
    std::memcpy(part.raw(), reinterpret_cast<const char*>(t.f32()) + offset, part.bytes());
    offset += part.bytes();
    out.push_back(std::move(part));
  }
  return out;
}

// ---- the two families' tables ---------------------------------------------

void add(std::vector<hf_mapping>& out, std::string merak, shape_t shape, std::string hf,
         bool transpose = false) {
  shape_t hf_shape = transpose ? shape_t{shape[1], shape[0]} : shape;
  out.push_back({std::move(merak), std::move(shape), {std::move(hf)}, {hf_shape}, transpose});
}

// A vocabulary table: merak's (padded V, C), Hugging Face's (V, C).
void add_vocab(std::vector<hf_mapping>& out, std::string merak, const gpt_config& c,
               std::string hf) {
  out.push_back({std::move(merak),
                 {c.padded_vocab(), c.dim},
                 {std::move(hf)},
                 {{c.vocab, c.dim}}});
}

std::vector<hf_mapping> gpt2_mappings(const gpt_config& c) {
  const int64_t C = c.dim, T = c.max_seq;
  std::vector<hf_mapping> out;
  add_vocab(out, "wte", c, "wte.weight");
  add(out, "wpe", {T, C}, "wpe.weight");
  for (int l = 0; l < c.layers; ++l) {
    const auto m = fmt::format("h{}.", l), h = fmt::format("h.{}.", l);
    add(out, m + "ln1.weight", {C}, h + "ln_1.weight");
    add(out, m + "ln1.bias", {C}, h + "ln_1.bias");
    add(out, m + "attn.qkv.weight", {3 * C, C}, h + "attn.c_attn.weight", true);
    add(out, m + "attn.qkv.bias", {3 * C}, h + "attn.c_attn.bias");
    add(out, m + "attn.proj.weight", {C, C}, h + "attn.c_proj.weight", true);
    add(out, m + "attn.proj.bias", {C}, h + "attn.c_proj.bias");
    add(out, m + "ln2.weight", {C}, h + "ln_2.weight");
    add(out, m + "ln2.bias", {C}, h + "ln_2.bias");
    add(out, m + "mlp.fc.weight", {4 * C, C}, h + "mlp.c_fc.weight", true);
    add(out, m + "mlp.fc.bias", {4 * C}, h + "mlp.c_fc.bias");
    add(out, m + "mlp.proj.weight", {C, 4 * C}, h + "mlp.c_proj.weight", true);
    add(out, m + "mlp.proj.bias", {C}, h + "mlp.c_proj.bias");
  }
  add(out, "ln_f.weight", {C}, "ln_f.weight");
  add(out, "ln_f.bias", {C}, "ln_f.bias");
  if (!c.tied_head) add_vocab(out, "lm_head.weight", c, "lm_head.weight");
  return out;
}

std::vector<hf_mapping> llama_mappings(const gpt_config& c, bool hf_tied) {
  const int64_t C = c.dim, F = llama_ffn_size(c);
  const int64_t KV = int64_t(llama_query_groups(c)) * (C / c.heads);  // G x D
  std::vector<hf_mapping> out;
  add_vocab(out, "embedding.word_embeddings.weight", c, "model.embed_tokens.weight");
  for (int l = 0; l < c.layers; ++l) {
    const auto m = fmt::format("decoder.layers.{}.", l), h = fmt::format("model.layers.{}.", l);
    add(out, m + "input_layernorm.weight", {C}, h + "input_layernorm.weight");
    out.push_back({m + "self_attention.linear_qkv.weight",
                   {C + 2 * KV, C},
                   {h + "self_attn.q_proj.weight", h + "self_attn.k_proj.weight",
                    h + "self_attn.v_proj.weight"},
                   {{C, C}, {KV, C}, {KV, C}}});
    add(out, m + "self_attention.linear_proj.weight", {C, C}, h + "self_attn.o_proj.weight");
    add(out, m + "pre_mlp_layernorm.weight", {C}, h + "post_attention_layernorm.weight");
    out.push_back({m + "mlp.linear_fc1.weight",
                   {2 * F, C},
                   {h + "mlp.gate_proj.weight", h + "mlp.up_proj.weight"},
                   {{F, C}, {F, C}}});
    add(out, m + "mlp.linear_fc2.weight", {C, F}, h + "mlp.down_proj.weight");
  }
  add(out, "decoder.final_layernorm.weight", {C}, "model.norm.weight");
  add_vocab(out, "output_layer.weight", c, hf_tied ? "model.embed_tokens.weight" : "lm_head.weight");
  return out;
}

// GPT-2 names as written: the body under "transformer.".
std::string written_name(const gpt_config& c, const std::string& hf) {
  return c.family == model_family::gpt && hf != "lm_head.weight" ? kGpt2Prefix + hf : hf;
}

}  // namespace

std::vector<hf_mapping> hf_mappings(const gpt_config& config, bool hf_tied) {
  config.validate();
  return config.family == model_family::llama ? llama_mappings(config, hf_tied)
                                              : gpt2_mappings(config);
}

hf_model read_hf_checkpoint(const std::string& dir) {
  const std::string config_path = (fs::path(dir) / kConfigFile).string();
  hf_model out;
  out.config = parse_hf_config(read_json_text(config_path, "Hugging Face config"),
                               fmt::format("'{}'", config_path));
  const gpt_config& c = out.config.model;
  hf_tensor_source source(dir);
  std::set<std::string> expected;  // HF names the model reads
  for (const hf_mapping& m : hf_mappings(c, out.config.tied)) {
    std::vector<const tensor*> parts;
    for (size_t i = 0; i < m.hf.size(); ++i) {
      std::string file, name = written_name(c, m.hf[i]);
      const tensor* t = source.find(name, file);
      if (!t && name != m.hf[i]) t = source.find(name = m.hf[i], file);
      if (!t)
        fail("'{}': tensor '{}' is missing ({} of {} layers, as '{}' describes)", source.listing(),
             m.hf[i], out.config.architecture, c.layers, config_path);
      if (t->type() != dtype::f32 || t->shape() != m.hf_shapes[i])
        fail("'{}': tensor '{}' has shape {} ({}); '{}' asks for {}", file, name,
             shape_str(t->shape()), dtype_name(t->type()), config_path, shape_str(m.hf_shapes[i]));
      expected.insert(name);
      parts.push_back(t);
    }
    out.parameters.emplace(m.merak, merak_tensor(m, parts));
  }
  // A tied model's file may repeat the head; anything else is a model other
  // than the config's.
  for (auto& [name, file] : source.all_names())
    if (!expected.count(name) && !is_ignored_buffer(name) &&
        !(out.config.tied && name == "lm_head.weight"))
      fail("'{}': tensor '{}' is not part of the {} that '{}' describes", file, name,
           out.config.architecture, config_path);
  return out;
}

namespace {

// A float as the shortest decimal that reads back as it (1e-06, not
// 9.99999997e-07).
double shortest(float v) {
  return std::stod(fmt::format("{}", v));
}

json hf_config_json(const gpt_config& c, dtype type) {
  const char* torch_dtype = type == dtype::bf16 ? "bfloat16" : "float32";
  if (c.family == model_family::gpt)
    return {{"architectures", {kGpt2}},
            {"model_type", "gpt2"},
            {"torch_dtype", torch_dtype},
            {"n_embd", c.dim},
            {"n_layer", c.layers},
            {"n_head", c.heads},
            {"n_positions", c.max_seq},
            {"n_ctx", c.max_seq},
            {"vocab_size", c.vocab},
            {"layer_norm_epsilon", 1e-5},
            {"activation_function", "gelu_new"},
            {"tie_word_embeddings", c.tied_head}};
  return {{"architectures", {kLlama}},
          {"model_type", "llama"},
          {"torch_dtype", torch_dtype},
          {"hidden_size", c.dim},
          {"intermediate_size", llama_ffn_size(c)},
          {"num_attention_heads", c.heads},
          {"num_key_value_heads", llama_query_groups(c)},
          {"num_hidden_layers", c.layers},
          {"vocab_size", c.vocab},
          {"max_position_embeddings", c.max_seq},
          {"rms_norm_eps", shortest(c.norm_epsilon)},
          {"rope_theta", shortest(c.rotary_base)},
          {"hidden_act", "silu"},
          {"attention_bias", false},
          {"mlp_bias", false},
          {"tie_word_embeddings", false}};
}

}  // namespace

void write_hf_checkpoint(const std::string& dir, const gpt_config& config,
                         const std::function<tensor(const std::string&)>& parameter,
                         const hf_write_options& options) {
  if (options.type != dtype::f32 && options.type != dtype::bf16)
    fail("Hugging Face export: dtype {} (merak writes F32 or BF16)", dtype_name(options.type));
  std::vector<std::pair<std::string, tensor>> tensors;  // HF name, stored tensor
  uint64_t total = 0;
  for (const hf_mapping& m : hf_mappings(config, false)) {
    tensor t = parameter(m.merak);
    if (t.type() != dtype::f32 || t.shape() != m.merak_shape)
      fail("parameter '{}' is {} {}; model {} has {}", m.merak, dtype_name(t.type()),
           shape_str(t.shape()), config.str(), shape_str(m.merak_shape));
    std::vector<tensor> parts = hf_tensors(m, t);
    for (size_t i = 0; i < parts.size(); ++i) {
      tensors.emplace_back(written_name(config, m.hf[i]),
                           stored_as(std::move(parts[i]), options.type));
      total += tensors.back().second.bytes();
    }
  }
  // Shards: consecutive tensors while they fit (a larger tensor alone).
  std::vector<std::vector<size_t>> shards(1);
  uint64_t in_shard = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const uint64_t bytes = tensors[i].second.bytes();
    if (!shards.back().empty() && in_shard + bytes > options.max_shard_bytes) {
      shards.emplace_back();
      in_shard = 0;
    }
    shards.back().push_back(i);
    in_shard += bytes;
  }
  const std::map<std::string, std::string> metadata{{"format", "pt"}};
  json weight_map = json::object();
  for (size_t s = 0; s < shards.size(); ++s) {
    const std::string file = shards.size() == 1 ? std::string(kWeightsFile)
                                                : fmt::format("model-{:05d}-of-{:05d}.safetensors",
                                                              s + 1, shards.size());
    std::vector<std::pair<std::string, const tensor*>> items;
    for (size_t i : shards[s]) {
      items.emplace_back(tensors[i].first, &tensors[i].second);
      weight_map[tensors[i].first] = file;
    }
    write_safetensors((fs::path(dir) / file).string(), items, metadata);
  }
  if (shards.size() > 1) {
    const json index{{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
    write_file_atomic((fs::path(dir) / kIndexFile).string(), index.dump(2) + "\n");
  }
  write_file_atomic((fs::path(dir) / kConfigFile).string(),
                    hf_config_json(config, options.type).dump(2) + "\n");
  fsync_directory(dir);
}

}  // namespace merak::model
