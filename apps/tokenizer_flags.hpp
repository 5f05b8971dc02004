#pragma once
// Megatron-LM's tokenizer flags, shared by every command that turns text
// into token ids (`merak data tokenize`, `merak data detokenize`,
// `merak data prepare`, `merak bench tokenize`):
//   --tokenizer-type   ByteTokenizer (default), GPT2BPETokenizer,
//                      HuggingFaceTokenizer or SentencePieceTokenizer
//   --vocab-file       GPT2BPETokenizer: encoder.json
//   --merge-file       GPT2BPETokenizer: vocab.bpe
//   --tokenizer-model  HuggingFaceTokenizer: tokenizer.json;
//                      SentencePieceTokenizer: a .model
// docs/tokenizers.md.

#include <CLI/CLI.hpp>

#include "model/text/tokenizer.hpp"

namespace merak::apps {

// Registers the four flags on `command`; they write into `options`, which
// must outlive the parse. make_tokenizer(options) then builds the tokenizer.
void add_tokenizer_flags(CLI::App& command, model::text::tokenizer_options& options);

}  // namespace merak::apps
