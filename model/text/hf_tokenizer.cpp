// HuggingFaceTokenizer: a Hugging Face tokenizer.json whose model is a
// byte-level BPE (GPT-2, Llama 3, Qwen, ...). What is read and what is
// refused is listed in docs/tokenizers.md; every refusal names the file and
// the JSON path of the component.
#include <nlohmann/json.hpp>

#include <unordered_map>

#include "core/error.hpp"
#include "model/text/bpe_files.hpp"
#include "model/text/byte_level_bpe.hpp"

namespace merak::model::text {

namespace {

using json = nlohmann::json;

// `path` of the file and the JSON path inside it, for messages.
struct locator {
  const std::string& file;
  std::string at(const std::string& json_path) const {
    return "--tokenizer-model " + file + ": " + json_path;
  }
};

const json* member(const json& object, const char* key) {
  auto it = object.find(key);
  return it == object.end() || it->is_null() ? nullptr : &*it;
}

bool optional_bool(const json& object, const char* key, bool fallback, const locator& where,
                   const std::string& path) {
  const json* v = member(object, key);
  if (!v) return fallback;
  if (!v->is_boolean()) fail("{}: not a boolean", where.at(path + "." + key));
  return v->get<bool>();
}

std::string type_of(const json& component, const locator& where, const std::string& path) {
  if (!component.is_object()) fail("{}: expected an object", where.at(path));
  const json* t = member(component, "type");
  if (!t || !t->is_string()) fail("{}: no string \"type\"", where.at(path));
  return t->get<std::string>();
}

split_behavior read_behavior(const json& split, const locator& where, const std::string& path) {
  const json* b = member(split, "behavior");
  if (!b || !b->is_string()) fail("{}: no string \"behavior\"", where.at(path + ".behavior"));
  const std::string name = b->get<std::string>();
  if (name == "Isolated") return split_behavior::isolated;
  if (name == "Removed") return split_behavior::removed;
  if (name == "MergedWithPrevious") return split_behavior::merged_with_previous;
  if (name == "MergedWithNext") return split_behavior::merged_with_next;
  if (name == "Contiguous") return split_behavior::contiguous;
  fail("{}: unknown behavior \"{}\"", where.at(path + ".behavior"), name);
}

pre_tokenizer_step read_split(const json& split, const locator& where, const std::string& path) {
  pre_tokenizer_step step;
  const json* pattern = member(split, "pattern");
  if (!pattern || !pattern->is_object())
    fail("{}: expected {{\"Regex\": ...}} or {{\"String\": ...}}", where.at(path + ".pattern"));
  if (const json* regex = member(*pattern, "Regex"); regex && regex->is_string())
    step.regex = std::make_shared<unicode_regex>(regex->get<std::string>(),
                                                 where.at(path + ".pattern.Regex"));
  else if (const json* literal = member(*pattern, "String"); literal && literal->is_string())
    step.regex = std::make_shared<unicode_regex>(literal->get<std::string>(),
                                                 where.at(path + ".pattern.String"), true);
  else
    fail("{}: expected {{\"Regex\": ...}} or {{\"String\": ...}}", where.at(path + ".pattern"));
  step.behavior = read_behavior(split, where, path);
  step.invert = optional_bool(split, "invert", false, where, path);
  return step;
}

// Appends the steps of pre-tokenizer `component` (at JSON path `path`).
void read_pre_tokenizer(const json& component, const locator& where, const std::string& path,
                        std::vector<pre_tokenizer_step>& steps) {
  const std::string type = type_of(component, where, path);
  if (type == "Sequence") {
    const json* list = member(component, "pretokenizers");
    if (!list || !list->is_array())
      fail("{}: expected an array", where.at(path + ".pretokenizers"));
    for (size_t i = 0; i < list->size(); ++i)
      read_pre_tokenizer((*list)[i], where, fmt::format("{}.pretokenizers[{}]", path, i), steps);
    return;
  }
  // The model works on raw bytes: ByteLevel's mapping of bytes to
  // characters is implicit, so nothing may look at the mapped text.
  const bool after_byte_level =
      !steps.empty() && steps.back().type == pre_tokenizer_step::kind::byte_level;
  if (after_byte_level)
    fail("{}: a {} after ByteLevel is not supported (ByteLevel must come last)", where.at(path),
         type);
  if (type == "Split") {
    steps.push_back(read_split(component, where, path));
  } else if (type == "ByteLevel") {
    pre_tokenizer_step step;
    step.type = pre_tokenizer_step::kind::byte_level;
    step.add_prefix_space = optional_bool(component, "add_prefix_space", true, where, path);
    if (optional_bool(component, "use_regex", true, where, path))
      step.regex = std::make_shared<unicode_regex>(kgpt2_pattern, "GPT-2's pre-tokenizer");
    steps.push_back(std::move(step));
  } else {
    fail("{}: pre-tokenizer type \"{}\" is not supported (Sequence, Split, ByteLevel)",
         where.at(path + ".type"), type);
  }
}

void check_model_options(const json& model, const locator& where) {
  const std::string type = model.contains("type") ? type_of(model, where, "model") : "BPE";
  if (type != "BPE")
    fail("{}: model type \"{}\" is not supported (BPE)", where.at("model.type"), type);
  if (member(model, "dropout"))
    fail("{}: BPE dropout is not supported (null)", where.at("model.dropout"));
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (const json* v = member(model, key); v && !(v->is_string() && v->get<std::string>().empty()))
      fail("{}: not supported (null)", where.at(std::string("model.") + key));
}

std::vector<added_token> read_added_tokens(const json& root, const locator& where,
                                           size_t id_limit) {
  std::vector<added_token> added;
  const json* list = member(root, "added_tokens");
  if (!list) return added;
  if (!list->is_array()) fail("{}: expected an array", where.at("added_tokens"));
  for (size_t i = 0; i < list->size(); ++i) {
    const json& t = (*list)[i];
    const std::string path = fmt::format("added_tokens[{}]", i);
    if (!t.is_object()) fail("{}: expected an object", where.at(path));
    const json* id = member(t, "id");
    const json* content = member(t, "content");
    if (!id || !id->is_number_integer()) fail("{}: not an integer", where.at(path + ".id"));
    if (!content || !content->is_string() || content->get<std::string>().empty())
      fail("{}: not a non-empty string", where.at(path + ".content"));
    const int64_t value = id->get<int64_t>();
    if (value < 0 || size_t(value) >= id_limit)
      fail("{}: {} is outside [0, {}) (the tokens the file defines)", where.at(path + ".id"), value,
           id_limit);
    for (const char* flag : {"lstrip", "rstrip", "single_word"})
      if (optional_bool(t, flag, false, where, path))
        fail("{}: true is not supported", where.at(path + "." + flag));
    added.push_back({content->get<std::string>(), int32_t(value)});
  }
  return added;
}

std::vector<bpe_merge> read_merges(const json& model, const locator& where,
                                   const byte_level_vocabulary& vocabulary) {
  const json* list = member(model, "merges");
  if (!list || !list->is_array()) fail("{}: expected an array", where.at("model.merges"));
  std::vector<bpe_merge> merges;
  merges.reserve(list->size());
  for (size_t i = 0; i < list->size(); ++i) {
    const json& m = (*list)[i];
    const std::string path = where.at(fmt::format("model.merges[{}]", i));
    if (m.is_string()) {
      const std::string& s = m.get_ref<const std::string&>();
      const size_t space = s.find(' ');
      if (space == std::string::npos || space == 0 || space + 1 == s.size() ||
          s.find(' ', space + 1) != std::string::npos)
        fail("{}: expected \"left right\", got {}", path, quote_token(s));
      merges.push_back(resolve_merge(vocabulary, std::string_view(s).substr(0, space),
                                     std::string_view(s).substr(space + 1), path));
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      merges.push_back(resolve_merge(vocabulary, m[0].get_ref<const std::string&>(),
                                     m[1].get_ref<const std::string&>(), path));
    } else {
      fail("{}: expected \"left right\" or [\"left\", \"right\"]", path);
    }
  }
  return merges;
}

std::optional<int32_t> find_eod(const std::vector<added_token>& added,
                                const byte_level_vocabulary& vocabulary) {
  for (const char* name : {"<|end_of_text|>", "<|endoftext|>"}) {
    for (auto& t : added)
      if (t.content == name) return t.id;
    if (auto it = vocabulary.ids.find(name); it != vocabulary.ids.end()) return it->second;
  }
  return std::nullopt;
}

}  // namespace

std::unique_ptr<tokenizer> make_huggingface_tokenizer(const std::string& path) {
  const locator where{path};
  const json root = parse_tokenizer_json(read_tokenizer_file(path, "--tokenizer-model"),
                                         "--tokenizer-model " + path);
  if (!root.is_object()) fail("{}: expected a JSON object", where.at("(top level)"));
  if (const json* n = member(root, "normalizer"))
    fail("{}: normalizer type \"{}\" is not supported (null)", where.at("normalizer"),
         n->is_object() && n->contains("type") ? n->at("type").dump() : n->dump());
  const json* model = member(root, "model");
  if (!model || !model->is_object()) fail("{}: expected an object", where.at("model"));
  check_model_options(*model, where);
  const json* vocab = member(*model, "vocab");
  if (!vocab || !vocab->is_object()) fail("{}: expected an object", where.at("model.vocab"));
  const json* added_list = member(root, "added_tokens");
  const size_t id_limit =
      vocab->size() + (added_list && added_list->is_array() ? added_list->size() : 0);
  byte_level_vocabulary vocabulary =
      read_byte_level_vocabulary(*vocab, where.at("model.vocab"), id_limit);
  byte_level_bpe_config config;
  config.type_name = "HuggingFaceTokenizer";
  config.added_tokens = read_added_tokens(root, where, id_limit);
  const json* pre = member(root, "pre_tokenizer");
  if (!pre) fail("{}: none (a byte-level BPE needs ByteLevel)", where.at("pre_tokenizer"));
  read_pre_tokenizer(*pre, where, "pre_tokenizer", config.steps);
  if (config.steps.empty() || config.steps.back().type != pre_tokenizer_step::kind::byte_level)
    fail("{}: no ByteLevel step (only byte-level BPE is supported)", where.at("pre_tokenizer"));
  if (const json* decoder = member(root, "decoder")) {
    const std::string type = type_of(*decoder, where, "decoder");
    if (type != "ByteLevel")
      fail("{}: decoder type \"{}\" is not supported (ByteLevel)", where.at("decoder.type"), type);
  }
  const std::vector<bpe_merge> merges = read_merges(*model, where, vocabulary);
  bpe_model bpe = build_bpe_model(vocabulary, merges,
                                  optional_bool(*model, "ignore_merges", false, where, "model"),
                                  where.at("model.vocab"), where.at("model.merges"));
  config.eod = find_eod(config.added_tokens, vocabulary);
  std::unordered_map<int32_t, size_t> added_index;
  for (size_t i = 0; i < config.added_tokens.size(); ++i) {
    const int32_t id = config.added_tokens[i].id;
    const auto& bytes = size_t(id) < vocabulary.token_bytes.size()
                            ? vocabulary.token_bytes[size_t(id)]
                            : std::optional<std::string>{};
    // An added token may repeat a vocabulary token (its own text), never take another's id.
    if (bytes && *bytes != config.added_tokens[i].content)
      fail("{}: id {} is vocabulary token {}", where.at(fmt::format("added_tokens[{}].id", i)), id,
           quote_token(*bytes));
    if (auto [it, fresh] = added_index.emplace(id, i); !fresh)
      fail("{}: id {} is added_tokens[{}] too", where.at(fmt::format("added_tokens[{}].id", i)), id,
           it->second);
  }
  config.token_bytes = std::move(vocabulary.token_bytes);
  return make_byte_level_bpe(std::move(config), std::move(bpe));
}

}  // namespace merak::model::text
