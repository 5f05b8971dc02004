#pragma once
// What the readers of encoder.json + vocab.bpe (gpt2_tokenizer.cpp) and of
// tokenizer.json (hf_tokenizer.cpp) share: reading the file, parsing JSON,
// a byte-level vocabulary, merges resolved to ids. Every failure is a
// merak::error whose message starts with `where` (the file, and the JSON
// path or line).

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "model/text/bpe.hpp"

namespace merak::model::text {

// `token` as a JSON string (escaped, invalid UTF-8 replaced), cut after 60
// bytes: for messages.
std::string quote_token(std::string_view token);

// The whole of `path` (`flag` names the option that gave it in messages).
// Refuses a missing, unreadable or non-regular file and one above 1 GiB.
std::string read_tokenizer_file(const std::string& path, const char* flag);

// `text` parsed as JSON; a syntax error names `where` and the byte offset.
nlohmann::json parse_tokenizer_json(const std::string& text, const std::string& where);

struct byte_level_vocabulary {
  std::unordered_map<std::string, int32_t> ids;         // token bytes -> id
  std::vector<std::optional<std::string>> token_bytes;  // id -> token bytes
};

// A JSON object of byte-level strings to ids. Ids must be distinct and
// below `id_limit` (the number of tokens the file defines in all: a
// vocabulary is dense, so a larger id is damage, and no table is sized by
// it); each string must be made of the 256 byte-level characters.
byte_level_vocabulary read_byte_level_vocabulary(const nlohmann::json& object,
                                                 const std::string& where, size_t id_limit);

// The merge of byte-level strings `left` and `right`, resolved to ids: both
// and their concatenation must be in `vocabulary`.
bpe_merge resolve_merge(const byte_level_vocabulary& vocabulary, std::string_view left,
                        std::string_view right, const std::string& where);

// The BPE model of `vocabulary` and `merges`; every single byte must be a
// token. `where` names the vocabulary (a missing byte) and the merges (a
// repeated merge).
bpe_model build_bpe_model(const byte_level_vocabulary& vocabulary,
                          const std::vector<bpe_merge>& merges, bool ignore_merges,
                          const std::string& vocabulary_where, const std::string& merges_where);

}  // namespace merak::model::text
