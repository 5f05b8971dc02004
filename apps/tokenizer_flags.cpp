#include "apps/tokenizer_flags.hpp"

namespace merak::apps {

void add_tokenizer_flags(CLI::App& command, model::text::tokenizer_options& options) {
  command
      .add_option("--tokenizer-type", options.type,
                  "ByteTokenizer, GPT2BPETokenizer, HuggingFaceTokenizer or "
                  "SentencePieceTokenizer")
      ->capture_default_str();
  command.add_option("--vocab-file", options.vocab_file, "GPT2BPETokenizer: encoder.json");
  command.add_option("--merge-file", options.merge_file, "GPT2BPETokenizer: vocab.bpe");
  command.add_option("--tokenizer-model", options.tokenizer_model,
                     "HuggingFaceTokenizer: tokenizer.json; SentencePieceTokenizer: a .model");
}

}  // namespace merak::apps
