// Hugging Face checkpoints: the mapping tables cover merak's models, the
// config and index parsers refuse damage by name, F16 and BF16 files are
// widened exactly, and write -> read keeps every parameter bit for bit.
// The losses against an independent reference: tests/apps/hf_checkpoint_test.sh.
#include <catch2/catch.hpp>

#include <algorithm>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

#include "core/error.hpp"
#include "model/graph.hpp"
#include "model/hf_checkpoint.hpp"
#include "model/model_metadata.hpp"
#include "model/safetensors.hpp"
#include "tests/model/test_util.hpp"

using namespace merak;
using namespace merak::model;
namespace fs = std::filesystem;

namespace {

gpt_config tiny_gpt(bool tied) {
  gpt_config c;
  c.vocab = 50;
  c.max_seq = 8;
  c.layers = 2;
  c.dim = 16;
  c.heads = 4;
  c.tied_head = tied;
  return c;
}

gpt_config tiny_llama() {
  gpt_config c = tiny_gpt(false);
  c.family = model_family::llama;
  c.query_groups = 2;
  c.ffn_hidden = 24;
  c.rotary_base = 500000.0f;
  c.norm_epsilon = 1e-6f;
  return c;
}

// name -> shape of every parameter the graph of `c` has.
std::map<std::string, shape_t> graph_parameters(const gpt_config& c) {
  std::map<std::string, shape_t> out;
  const graph g = build_model(c);
  for (auto& node : g.nodes())
    for (auto& p : node.params) out[p.name] = p.shape;
  return out;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const error& e) {
    return e.what();
  }
  return "(no error)";
}

struct temp_dir {
  fs::path path = fs::temp_directory_path() /
                  ("merak-hf-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
  temp_dir() { fs::create_directories(path); }
  ~temp_dir() { fs::remove_all(path); }
  static inline int counter = 0;
};

void write_text(const fs::path& p, const std::string& s) {
  std::ofstream(p, std::ios::binary | std::ios::trunc) << s;
}

}  // namespace

TEST_CASE("hf mappings cover every parameter of merak's models with its shape", "[hf]") {
  for (const gpt_config& c : {tiny_gpt(true), tiny_gpt(false), tiny_llama()}) {
    const auto want = graph_parameters(c);
    std::map<std::string, shape_t> got;
    for (const hf_mapping& m : hf_mappings(c, false)) {
      got[m.merak] = m.merak_shape;
      int64_t rows = 0;
      for (auto& s : m.hf_shapes) rows += m.transpose ? s[1] : s[0];
      // A vocabulary table: Hugging Face's V rows of merak's padded ones.
      CHECK((rows == m.merak_shape[0] ||
             (rows == c.vocab && m.merak_shape[0] == c.padded_vocab())));
    }
    CHECK(got == want);
  }
}

TEST_CASE("hf config of a GQA Llama gives merak's config", "[hf]") {
  const auto cfg = parse_hf_config(R"({"architectures": ["LlamaForCausalLM"],
      "hidden_size": 16, "intermediate_size": 24, "num_attention_heads": 4,
      "num_key_value_heads": 2, "num_hidden_layers": 2, "vocab_size": 50,
      "max_position_embeddings": 8, "rms_norm_eps": 1e-06, "rope_theta": 500000.0,
      "tie_word_embeddings": true})",
                                   "config.json");
  CHECK(cfg.model == tiny_llama());
  CHECK(cfg.tied);
  // What a checkpoint records reads back as the same config.
  CHECK(parse_model_metadata(model_metadata_json(cfg.model), "x") == cfg.model);
}

TEST_CASE("hf config damage is refused naming the file and the field", "[hf]") {
  const std::string gpt = R"("architectures": ["GPT2LMHeadModel"], "n_embd": 16, "n_layer": 2,
      "n_positions": 8, "vocab_size": 50)";
  auto err = [&](const std::string& fields) {
    return error_of([&] { parse_hf_config("{" + gpt + fields + "}", "'c.json'"); });
  };
  CHECK_THAT(err(""), Catch::Contains("'c.json': field 'n_head' is missing"));
  CHECK_THAT(err(R"(, "n_head": 4.5)"), Catch::Contains("field 'n_head' is 4.5"));
  CHECK_THAT(err(R"(, "n_head": -4)"), Catch::Contains("field 'n_head' is -4"));
  CHECK_THAT(err(R"(, "n_head": 3)"), Catch::Contains("--heads (3) must divide --dim (16)"));
  CHECK_THAT(err(R"(, "n_head": 4, "layer_norm_epsilon": 1e-6)"),
             Catch::Contains("field 'layer_norm_epsilon'"));
  CHECK_THAT(err(R"(, "n_head": 4, "activation_function": "relu")"),
             Catch::Contains("field 'activation_function' is \"relu\""));
  CHECK_THAT(err(R"(, "n_head": 4, "n_inner": 10)"), Catch::Contains("field 'n_inner' is 10"));
  CHECK_THAT(err(R"(, "n_head": 4, "tie_word_embeddings": "yes")"),
             Catch::Contains("field 'tie_word_embeddings' is \"yes\", not true or false"));
  CHECK(err(R"(, "n_head": 4)") == "(no error)");
  CHECK_THAT(error_of([] { parse_hf_config(R"({"model_type": "bert"})", "'c.json'"); }),
             Catch::Contains("'c.json': field 'model_type': unknown model type \"bert\""));
  CHECK_THAT(error_of([] { parse_hf_config("[1]", "'c.json'"); }),
             Catch::Contains("'c.json': not a JSON object"));
  CHECK_THAT(error_of([] { parse_hf_config("{", "'c.json'"); }),
             Catch::Contains("'c.json': not valid JSON"));
  const std::string llama = R"({"model_type": "llama", "hidden_size": 16,
      "intermediate_size": 24, "num_attention_heads": 4, "num_hidden_layers": 2,
      "vocab_size": 50, "max_position_embeddings": 8)";
  auto lerr = [&](const std::string& fields) {
    return error_of([&] { parse_hf_config(llama + fields + "}", "'c.json'"); });
  };
  CHECK(lerr("") == "(no error)");
  CHECK_THAT(lerr(R"(, "num_key_value_heads": 3)"), Catch::Contains("'num_key_value_heads' (3)"));
  CHECK_THAT(lerr(R"(, "head_dim": 8)"), Catch::Contains("field 'head_dim' is 8"));
  CHECK_THAT(lerr(R"(, "attention_bias": true)"), Catch::Contains("field 'attention_bias'"));
  CHECK_THAT(lerr(R"(, "hidden_act": "gelu")"), Catch::Contains("field 'hidden_act'"));
  CHECK_THAT(lerr(R"(, "rope_theta": "big")"), Catch::Contains("field 'rope_theta' is \"big\""));
}

TEST_CASE("hf index damage is refused naming the field and the tensor", "[hf]") {
  auto err = [](const std::string& text) {
    return error_of([&] { parse_hf_index(text, "'i.json'"); });
  };
  CHECK_THAT(err("{}"), Catch::Contains("'i.json': field 'weight_map' is missing"));
  CHECK_THAT(err(R"({"weight_map": []})"), Catch::Contains("field 'weight_map' is not an object"));
  CHECK_THAT(err(R"({"weight_map": {"a": 1}})"), Catch::Contains("tensor 'a' maps to 1"));
  CHECK_THAT(err(R"({"weight_map": {"a": "/etc/passwd"}})"),
             Catch::Contains("tensor 'a' maps to '/etc/passwd', not a file name"));
  CHECK_THAT(err(R"({"weight_map": {"a": ".."}})"), Catch::Contains("tensor 'a' maps to '..'"));
  CHECK(parse_hf_index(R"({"weight_map": {"a": "x.safetensors"}})", "i") ==
        std::map<std::string, std::string>{{"a", "x.safetensors"}});
}

TEST_CASE("F16 and BF16 tensors of other writers are widened to F32 exactly", "[hf]") {
  temp_dir d;
  // F16: 1, -2, 65504 (largest), 2^-24 (smallest subnormal), -0; BF16: 1.5, -3.
  const uint16_t f16[] = {0x3C00, 0xC000, 0x7BFF, 0x0001, 0x8000};
  const uint16_t bf16[] = {0x3FC0, 0xC040};
  std::string header = R"({"h":{"dtype":"F16","shape":[5],"data_offsets":[0,10]},)"
                       R"("b":{"dtype":"BF16","shape":[2],"data_offsets":[10,14]}})";
  std::string file(8, '\0');
  for (int i = 0; i < 8; ++i) file[size_t(i)] = char((header.size() >> (8 * i)) & 0xFF);
  file += header;
  file.append(reinterpret_cast<const char*>(f16), sizeof f16);
  file.append(reinterpret_cast<const char*>(bf16), sizeof bf16);
  const auto path = (d.path / "x.safetensors").string();
  write_text(path, file);
  CHECK_THAT(error_of([&] { read_safetensors(path); }), Catch::Contains("unsupported dtype 'F16'"));
  CHECK_THAT(error_of([&] { read_safetensors(path, {.widen_to_f32 = true}); }),
             Catch::Contains("no merak.crc32c checksum"));
  auto f = read_safetensors(path, {.require_checksum = false, .widen_to_f32 = true});
  const float* h = f.tensors.at("h").f32();
  CHECK(h[0] == 1.0f);
  CHECK(h[1] == -2.0f);
  CHECK(h[2] == 65504.0f);
  CHECK(h[3] == std::ldexp(1.0f, -24));
  CHECK((h[4] == 0.0f && std::signbit(h[4])));
  CHECK(f.tensors.at("b").f32()[0] == 1.5f);
  CHECK(f.tensors.at("b").f32()[1] == -3.0f);
}

TEST_CASE("hf write then read keeps every parameter bit for bit", "[hf]") {
  for (const gpt_config& c : {tiny_gpt(true), tiny_gpt(false), tiny_llama()})
    for (uint64_t shard_bytes : {uint64_t{1} << 40, uint64_t{4000}}) {
      temp_dir d;
      std::map<std::string, tensor> params;
      uint64_t seed = 1;
      for (auto& [name, shape] : graph_parameters(c)) {
        auto t = test::random_tensor(shape, seed++);
        // A vocabulary table's padding rows are not exported: zero, as read back.
        if (c.padded_vocab() != c.vocab && shape.size() == 2 && shape[0] == c.padded_vocab())
          std::fill(t.f32() + int64_t(c.vocab) * shape[1], t.f32() + t.numel(), 0.f);
        params.emplace(name, std::move(t));
      }
      REQUIRE(c.padded_vocab() != c.vocab);  // the padding is exercised
      write_hf_checkpoint(d.path.string(), c,
                          [&](const std::string& n) { return params.at(n).clone(); },
                          {.max_shard_bytes = shard_bytes});
      CHECK(fs::exists(d.path / "model.safetensors.index.json") == (shard_bytes == 4000));
      const hf_model back = read_hf_checkpoint(d.path.string());
      CHECK(back.config.model == c);
      REQUIRE(back.parameters.size() == params.size());
      for (auto& [name, t] : params) {
        const tensor& b = back.parameters.at(name);
        REQUIRE(b.shape() == t.shape());
        CHECK(std::memcmp(b.raw(), t.raw(), t.bytes()) == 0);
      }
    }
}

TEST_CASE("hf export refuses a parameter of another shape by name", "[hf]") {
  temp_dir d;
  const gpt_config c = tiny_gpt(true);
  CHECK_THAT(
      error_of([&] {
        write_hf_checkpoint(d.path.string(), c, [](const std::string&) { return tensor({3, 3}); });
      }),
      Catch::Contains("parameter 'wte' is F32 (3, 3); model"));
}
