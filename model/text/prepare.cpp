#include "model/text/prepare.hpp"

#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <memory>
#include <thread>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/files.hpp"
#include "model/text/indexed_dataset.hpp"

namespace merak::model::text {
namespace {

// Input bytes per block; the workers split a block between them.
constexpr size_t kBlockBytesPerWorker = size_t(1) << 20;

struct item {
  std::string text;  // a plain-text file's contents or one JSONL line
  size_t file;
  int64_t line;  // 1-based JSONL line; 0: a plain-text file
};

// ids[item][key]
using encoded_block = std::vector<std::vector<std::vector<int32_t>>>;

bool is_jsonl(const std::string& path) {
  const auto ext = std::filesystem::path(path).extension();
  return ext == ".jsonl" || ext == ".json";
}

// Reads the inputs in order, a block of items at a time.
class input_reader {
 public:
  explicit input_reader(const std::vector<std::string>& inputs) : inputs_(inputs) {
    for (const auto& path : inputs_) {
      check_input_file(path, "input file");
      std::error_code ec;
      const auto size = std::filesystem::file_size(path, ec);
      if (ec) fail("cannot read input file '{}': {}", path, ec.message());
      total_ += int64_t(size);
    }
  }

  int64_t total_bytes() const { return total_; }
  int64_t bytes_read() const { return read_; }

  // Items until `bytes` are gathered or the inputs end (empty: the end).
  std::vector<item> next(size_t bytes) {
    std::vector<item> out;
    size_t gathered = 0;
    while (gathered < bytes && file_ < inputs_.size()) {
      const std::string& path = inputs_[file_];
      if (!is_jsonl(path)) {
        std::ifstream f(path, std::ios::binary);
        if (!f) fail("cannot open input file '{}'", path);
        std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
        if (f.bad()) fail("error reading input file '{}'", path);
        read_ += int64_t(text.size());
        gathered += text.size();
        out.push_back({std::move(text), file_, 0});
        ++file_;
        continue;
      }
      if (!stream_.is_open()) {
        stream_.open(path, std::ios::binary);
        if (!stream_) fail("cannot open input file '{}'", path);
        line_ = 0;
      }
      std::string line;
      if (!std::getline(stream_, line)) {
        if (stream_.bad()) fail("error reading input file '{}' after line {}", path, line_);
        stream_.close();
        ++file_;
        continue;
      }
      ++line_;
      read_ += int64_t(line.size()) + 1;
      gathered += line.size() + 1;
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      out.push_back({std::move(line), file_, line_});
    }
    return out;
  }

 private:
  const std::vector<std::string>& inputs_;
  size_t file_ = 0;
  std::ifstream stream_;
  int64_t line_ = 0, read_ = 0, total_ = 0;
};

// The documents of items [begin, end), per key.
encoded_block encode_range(const std::vector<item>& items, size_t begin, size_t end,
                           const prepare_options& o, const std::vector<std::string>& paths,
                           const tokenizer& tok) {
  encoded_block out(end - begin);
  const auto eod = tok.eod();
  auto finish = [&](std::vector<int32_t>& ids) {
    if (o.append_eod && !ids.empty()) ids.push_back(*eod);
  };
  for (size_t i = begin; i < end; ++i) {
    const item& it = items[i];
    auto& docs = out[i - begin];
    if (it.line == 0) {
      docs.push_back(tok.encode(it.text));
      finish(docs.back());
      continue;
    }
    const std::string& path = paths[it.file];
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(it.text);
    } catch (const nlohmann::json::exception& e) {
      fail("input file '{}' line {}: not JSON ({})", path, it.line, e.what());
    }
    if (!j.is_object()) fail("input file '{}' line {}: not a JSON object", path, it.line);
    for (const auto& key : o.json_keys) {
      const auto found = j.find(key);
      if (found == j.end())
        fail("input file '{}' line {}: key '{}' (--json-keys) is missing", path, it.line, key);
      if (!found->is_string())
        fail("input file '{}' line {}: key '{}' is not a string", path, it.line, key);
      docs.push_back(tok.encode(found->get_ref<const std::string&>()));
      finish(docs.back());
    }
  }
  return out;
}

// Splits the block between `workers` threads by bytes; the parts in order.
encoded_block encode_block(const std::vector<item>& items, const prepare_options& o,
                           const std::vector<std::string>& paths, const tokenizer& tok) {
  const size_t n = items.size();
  const size_t parts = std::min<size_t>(size_t(std::max(1, o.workers)), n);
  size_t total = 0;
  for (const auto& it : items) total += it.text.size() + 1;
  std::vector<size_t> bounds{0};
  size_t acc = 0;
  for (size_t i = 0; i < n && bounds.size() < parts; ++i) {
    acc += items[i].text.size() + 1;
    if (acc * parts >= total * bounds.size()) bounds.push_back(i + 1);
  }
  bounds.push_back(n);
  std::vector<std::future<encoded_block>> futures;
  for (size_t p = 0; p + 1 < bounds.size(); ++p)
    futures.push_back(std::async(std::launch::async, encode_range, std::cref(items), bounds[p],
                                 bounds[p + 1], std::cref(o), std::cref(paths), std::cref(tok)));
  encoded_block out;
  out.reserve(n);
  for (auto& f : futures)
    for (auto& docs : f.get()) out.push_back(std::move(docs));
  return out;
}

}  // namespace

std::string prepared_prefix(const std::string& output_prefix, const std::string& key) {
  return output_prefix + "_" + key + "_document";
}

prepare_result prepare_dataset(const prepare_options& o, const tokenizer& tok) {
  if (o.inputs.empty()) fail("--input: give at least one file");
  if (o.output_prefix.empty()) fail("--output-prefix is required");
  if (o.json_keys.empty()) fail("--json-keys: give at least one key");
  if (o.workers < 1) fail("--workers must be at least 1 (got {})", o.workers);
  if (o.append_eod && !tok.eod())
    fail("--append-eod: the {} tokenizer has no end-of-document id", tok.type_name());
  const auto start = std::chrono::steady_clock::now();
  input_reader reader(o.inputs);
  prepare_result result;
  result.totals.bytes_total = reader.total_bytes();
  std::vector<std::unique_ptr<indexed_dataset_writer>> writers;
  const index_dtype dtype = dtype_for_vocab(tok.vocab_size());
  for (const auto& key : o.json_keys) {
    result.outputs.push_back(prepared_prefix(o.output_prefix, key));
    writers.push_back(std::make_unique<indexed_dataset_writer>(result.outputs.back(), dtype));
  }
  auto write = [&](encoded_block block) {
    for (auto& docs : block) {
      for (size_t k = 0; k < docs.size(); ++k) writers[k]->add_document(docs[k]);
      result.totals.tokens += int64_t(docs[0].size());
    }
    result.totals.documents = writers[0]->documents();
    result.totals.bytes_read = reader.bytes_read();
    result.totals.seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (o.progress) o.progress(result.totals);
  };
  // Block k is tokenized while block k - 1 is written and block k + 1 read.
  const size_t block_bytes = kBlockBytesPerWorker * size_t(o.workers);
  std::future<encoded_block> pending;
  auto items = std::make_shared<std::vector<item>>(reader.next(block_bytes));
  while (!items->empty()) {
    auto next = std::async(std::launch::async,
                           [items, &o, &tok] { return encode_block(*items, o, o.inputs, tok); });
    if (pending.valid()) write(pending.get());
    items = std::make_shared<std::vector<item>>(reader.next(block_bytes));
    pending = std::move(next);
  }
  if (pending.valid()) write(pending.get());
  for (auto& w : writers) w->finish();
  result.totals.bytes_read = reader.bytes_read();
  result.totals.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

}  // namespace merak::model::text
