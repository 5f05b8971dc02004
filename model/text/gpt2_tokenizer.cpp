// GPT2BPETokenizer: OpenAI's encoder.json (byte-level token -> id) and
// vocab.bpe (a "#version" line, then one merge "left right" a line, in rank
// order), read as openai/gpt-2's encoder.py reads them. The text is not
// searched for "<|endoftext|>": like encoder.py and Megatron-LM's
// GPT2BPETokenizer, only eod() names it. docs/tokenizers.md.
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "model/text/bpe_files.hpp"
#include "model/text/byte_level_bpe.hpp"

namespace merak::model::text {

namespace {

// The merges of vocab.bpe's `text`, resolved against `vocabulary`.
std::vector<bpe_merge> read_merges_file(const std::string& text, const std::string& path,
                                        const byte_level_vocabulary& vocabulary) {
  std::vector<bpe_merge> merges;
  size_t line_number = 0, at = 0;
  bool blank_seen = false;
  while (at < text.size()) {
    size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    std::string_view line(text.data() + at, end - at);
    at = end + 1;
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line_number == 1 && line.starts_with("#version")) continue;
    const std::string where = fmt::format("--merge-file {} line {}", path, line_number);
    if (line.empty()) {
      blank_seen = true;
      continue;
    }
    if (blank_seen) fail("{}: a merge after a blank line", where);
    const size_t space = line.find(' ');
    if (space == std::string_view::npos || space == 0 || space + 1 == line.size() ||
        line.find(' ', space + 1) != std::string_view::npos)
      fail("{}: expected two tokens separated by one space, got {}", where, quote_token(line));
    merges.push_back(resolve_merge(vocabulary, line.substr(0, space), line.substr(space + 1),
                                   where + " (against --vocab-file)"));
  }
  return merges;
}

}  // namespace

std::unique_ptr<tokenizer> make_gpt2_bpe_tokenizer(const std::string& vocab_file,
                                                   const std::string& merge_file) {
  const std::string vocab_where = "--vocab-file " + vocab_file;
  const nlohmann::json encoder =
      parse_tokenizer_json(read_tokenizer_file(vocab_file, "--vocab-file"), vocab_where);
  byte_level_vocabulary vocabulary =
      read_byte_level_vocabulary(encoder, vocab_where, encoder.is_object() ? encoder.size() : 0);
  const std::vector<bpe_merge> merges =
      read_merges_file(read_tokenizer_file(merge_file, "--merge-file"), merge_file, vocabulary);
  bpe_model model = build_bpe_model(vocabulary, merges, /*ignore_merges=*/false, vocab_where,
                                    "--merge-file " + merge_file);
  byte_level_bpe_config config;
  config.type_name = "GPT2BPETokenizer";
  pre_tokenizer_step byte_level;
  byte_level.type = pre_tokenizer_step::kind::byte_level;
  byte_level.regex = std::make_shared<unicode_regex>(kgpt2_pattern, "GPT-2's pre-tokenizer");
  config.steps.push_back(std::move(byte_level));
  if (auto it = vocabulary.ids.find("<|endoftext|>"); it != vocabulary.ids.end())
    config.eod = it->second;
  config.token_bytes = std::move(vocabulary.token_bytes);
  return make_byte_level_bpe(std::move(config), std::move(model));
}

}  // namespace merak::model::text
