#pragma once
// `merak data prepare`: raw text to Megatron indexed datasets, as Megatron's
// tools/preprocess_data.py does. Inputs are plain text (a file is one
// document) or JSONL (a file named *.jsonl or *.json: one JSON object per
// line, the document being the string under each --json-keys key; blank
// lines are skipped). Each key K writes PREFIX_K_document.bin/.idx (plain
// text files go to the first key's dataset). `workers` threads tokenize
// while the calling thread reads and writes; documents keep their input
// order, so the output does not depend on the worker count.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "model/text/tokenizer.hpp"

namespace merak::model::text {

struct prepare_progress {
  int64_t bytes_read = 0, bytes_total = 0;  // input bytes
  int64_t documents = 0, tokens = 0;        // written so far (documents of the first key)
  double seconds = 0;
};

struct prepare_options {
  std::vector<std::string> inputs;
  std::string output_prefix;
  std::vector<std::string> json_keys{"text"};
  bool append_eod = false;  // the tokenizer's end-of-document id after every non-empty document
  int workers = 1;
  // Called on the calling thread after each block of documents is written.
  std::function<void(const prepare_progress&)> progress;
};

struct prepare_result {
  prepare_progress totals;
  std::vector<std::string> outputs;  // the prefixes written, one per key
};

// Tokenizes the inputs with `tok` and writes the datasets. Throws
// merak::error naming the file and line of a bad JSONL line (not an object,
// a key missing or not a string), an unreadable input, or a failed write;
// no dataset is left half-written.
prepare_result prepare_dataset(const prepare_options& options, const tokenizer& tok);

// PREFIX_KEY_document: the name Megatron's preprocess_data.py gives.
std::string prepared_prefix(const std::string& output_prefix, const std::string& key);

}  // namespace merak::model::text
