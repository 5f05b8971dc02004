#include "model/text/bpe_files.hpp"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "model/text/unicode.hpp"

namespace merak::model::text {

namespace {
constexpr size_t kmax_tokenizer_file = size_t(1) << 30;
}

std::string quote_token(std::string_view token) {
  const bool cut = token.size() > 60;
  std::string q = nlohmann::json(std::string(token.substr(0, 60)))
                      .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (cut) q.insert(q.size() - 1, "...");
  return q;
}

std::string read_tokenizer_file(const std::string& path, const char* flag) {
  if (path.empty()) fail("{}: no file given", flag);
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) fail("{} {}: {}", flag, path, std::strerror(errno));
  if (!S_ISREG(st.st_mode)) fail("{} {}: not a regular file", flag, path);
  if (size_t(st.st_size) > kmax_tokenizer_file)
    fail("{} {}: {} bytes, more than the {} a tokenizer file may have", flag, path, st.st_size,
         kmax_tokenizer_file);
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{} {}: cannot open: {}", flag, path, std::strerror(errno));
  std::string text(size_t(st.st_size), '\0');
  in.read(text.data(), std::streamsize(text.size()));
  if (size_t(in.gcount()) != text.size())
    fail("{} {}: read {} of its {} bytes", flag, path, in.gcount(), text.size());
  return text;
}

nlohmann::json parse_tokenizer_json(const std::string& text, const std::string& where) {
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    fail("{}: not valid JSON at byte {}", where, e.byte);
  }
}

byte_level_vocabulary read_byte_level_vocabulary(const nlohmann::json& object,
                                                 const std::string& where, size_t id_limit) {
  if (!object.is_object()) fail("{}: expected an object of token strings to ids", where);
  byte_level_vocabulary v;
  v.token_bytes.resize(std::min(object.size(), id_limit));
  v.ids.reserve(object.size());
  for (auto& [token, value] : object.items()) {
    if (!value.is_number_integer())
      fail("{}: the id of token {} is not an integer", where, quote_token(token));
    const int64_t id = value.get<int64_t>();
    if (id < 0 || size_t(id) >= id_limit)
      fail("{}: token {} has id {}, outside [0, {}) (the tokens the file defines)", where,
           quote_token(token), id, id_limit);
    char32_t bad = 0;
    auto bytes = byte_level_decode(token, &bad);
    if (!bytes)
      fail("{}: token {} has character U+{:04X}, outside the 256 of the byte-level alphabet", where,
           quote_token(token), uint32_t(bad));
    if (size_t(id) >= v.token_bytes.size()) v.token_bytes.resize(size_t(id) + 1);
    if (v.token_bytes[size_t(id)])
      fail("{}: token {} has id {}, which token {} has too", where, quote_token(token), id,
           quote_token(byte_level_encode(*v.token_bytes[size_t(id)])));
    if (bytes->empty()) fail("{}: an empty token (id {})", where, id);
    v.token_bytes[size_t(id)] = *bytes;
    v.ids.emplace(std::move(*bytes), int32_t(id));
  }
  return v;
}

bpe_merge resolve_merge(const byte_level_vocabulary& vocabulary, std::string_view left,
                        std::string_view right, const std::string& where) {
  auto id_of = [&](std::string_view token, const char* role) {
    auto bytes = byte_level_decode(token);
    auto it = bytes ? vocabulary.ids.find(*bytes) : vocabulary.ids.end();
    if (it == vocabulary.ids.end())
      fail("{}: the {} {} is not in the vocabulary", where, role, quote_token(token));
    return it->second;
  };
  const int32_t l = id_of(left, "left part"), r = id_of(right, "right part");
  const std::string joined = std::string(left) + std::string(right);
  return {l, r, id_of(joined, "merged token")};
}

bpe_model build_bpe_model(const byte_level_vocabulary& vocabulary,
                          const std::vector<bpe_merge>& merges, bool ignore_merges,
                          const std::string& vocabulary_where, const std::string& merges_where) {
  std::vector<int32_t> byte_tokens(256);
  for (int b = 0; b < 256; ++b) {
    auto it = vocabulary.ids.find(std::string(1, char(b)));
    if (it == vocabulary.ids.end())
      fail("{}: no token for byte 0x{:02X} ({}): a byte-level vocabulary has all 256",
           vocabulary_where, b, quote_token(byte_level_encode(std::string(1, char(b)))));
    byte_tokens[size_t(b)] = it->second;
  }
  try {
    return bpe_model(std::move(byte_tokens), vocabulary.ids, merges, ignore_merges);
  } catch (const error& e) {
    fail("{}: {}", merges_where, e.what());
  }
}

}  // namespace merak::model::text
