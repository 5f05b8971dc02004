#include "model/model_metadata.hpp"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "model/llama.hpp"

namespace merak::model {
namespace {

using json = nlohmann::json;

int count_field(const json& j, const char* key, const std::string& where) {
  auto it = j.find(key);
  if (it == j.end()) fail("{}: merak.model has no field '{}'", where, key);
  if (!it->is_number_integer() || it->get<int64_t>() < 0 || it->get<int64_t>() > (1 << 30))
    fail("{}: merak.model field '{}' is {}, not a count", where, key, it->dump());
  return it->get<int>();
}

float real_field(const json& j, const char* key, const std::string& where) {
  auto it = j.find(key);
  if (it == j.end()) fail("{}: merak.model has no field '{}'", where, key);
  if (!it->is_number())
    fail("{}: merak.model field '{}' is {}, not a number", where, key, it->dump());
  return it->get<float>();
}

}  // namespace

std::string model_metadata_json(const gpt_config& c) {
  json j{{"family", c.build ? "custom" : model_family_name(c.family)},
         {"vocab", c.vocab},
         {"seq", c.max_seq},
         {"layers", c.layers},
         {"dim", c.dim},
         {"heads", c.heads}};
  if (c.padded_vocab() != c.vocab) j["vocab_divisible_by"] = c.vocab_divisible_by;
  if (!c.tied_head) j["tied_head"] = false;  // absent: tied (checkpoints before the option)
  if (c.family == model_family::llama && !c.build) {
    j["query_groups"] = llama_query_groups(c);
    j["ffn_hidden"] = llama_ffn_size(c);
    j["rotary_base"] = c.rotary_base;
    j["norm_epsilon"] = c.norm_epsilon;
  }
  return j.dump();
}

gpt_config parse_model_metadata(const std::string& text, const std::string& where) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    fail("{}: merak.model is not JSON: {}", where, e.what());
  }
  if (!j.is_object()) fail("{}: merak.model is not a JSON object", where);
  auto family = j.find("family");
  if (family == j.end() || !family->is_string())
    fail("{}: merak.model field 'family' is missing or not a string", where);
  if (*family == "custom")
    fail("{}: the checkpoint holds a custom model (only gpt and llama have a known layout)", where);
  gpt_config c;
  c.family = parse_model_family(family->get<std::string>());
  c.vocab = count_field(j, "vocab", where);
  // Absent: no padding (the vocabulary as it is).
  c.vocab_divisible_by = j.contains("vocab_divisible_by")
                             ? std::max(1, count_field(j, "vocab_divisible_by", where))
                             : 1;
  c.max_seq = count_field(j, "seq", where);
  c.layers = count_field(j, "layers", where);
  c.dim = count_field(j, "dim", where);
  c.heads = count_field(j, "heads", where);
  if (auto tied = j.find("tied_head"); tied != j.end()) {
    if (!tied->is_boolean()) fail("{}: merak.model field 'tied_head' is not true or false", where);
    c.tied_head = tied->get<bool>();
  }
  if (c.family == model_family::llama) {
    c.tied_head = false;
    c.query_groups = count_field(j, "query_groups", where);
    c.ffn_hidden = count_field(j, "ffn_hidden", where);
    c.rotary_base = real_field(j, "rotary_base", where);
    c.norm_epsilon = real_field(j, "norm_epsilon", where);
  }
  try {
    c.validate();
  } catch (const error& e) {
    fail("{}: merak.model {}: {}", where, text, e.what());
  }
  return c;
}

}  // namespace merak::model
