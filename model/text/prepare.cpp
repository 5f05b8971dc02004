#include "model/text/prepare.hpp"

#include <chrono>
#include <cstring>
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

// A block of input: the bytes read and the documents in them.
struct item {
  size_t begin, end;  // in block::text
  size_t file;
  int64_t line;  // 1-based JSONL line; 0: a plain-text file
};
struct block {
  std::string text;
  std::vector<item> items;
};

// A block's documents encoded in the output dtype, per key: the bytes of
// every document back to back and each document's size in bytes.
struct encoded_block {
  std::vector<std::vector<uint8_t>> bytes;  // [key]
  std::vector<std::vector<size_t>> sizes;   // [key][document]
  int64_t tokens = 0;                       // of the first key's documents
};

bool is_jsonl(const std::string& path) {
  const auto ext = std::filesystem::path(path).extension();
  return ext == ".jsonl" || ext == ".json";
}

// Reads the inputs in order, a block at a time: whole plain-text files, and
// JSONL in chunks cut at line ends.
class input_reader {
 public:
  explicit input_reader(const std::vector<std::string>& inputs) : inputs_(inputs) {
    for (const auto& path : inputs_) {
      check_input_file(path, "input file");
      std::error_code ec;
      const auto size = std::filesystem::file_size(path, ec);
      if (ec) fail("cannot read input file '{}': {}", path, ec.message());
      total_ += int64_t(size);
      jsonl_.push_back(is_jsonl(path));
    }
  }

  int64_t total_bytes() const { return total_; }
  int64_t bytes_read() const { return read_; }

  // About `bytes` of input (more for a large plain-text file); no items at
  // the end of the inputs.
  block next(size_t bytes) {
    block b;
    while (b.text.size() < bytes && file_ < inputs_.size()) {
      const std::string& path = inputs_[file_];
      if (!jsonl_[file_]) {
        std::ifstream f(path, std::ios::binary);
        if (!f) fail("cannot open input file '{}'", path);
        const size_t at = b.text.size();
        char chunk[1 << 16];
        while (f.read(chunk, sizeof chunk) || f.gcount() > 0)
          b.text.append(chunk, size_t(f.gcount()));
        if (f.bad()) fail("error reading input file '{}'", path);
        read_ += int64_t(b.text.size() - at);
        b.items.push_back({at, b.text.size(), file_, 0});
        ++file_;
        continue;
      }
      if (!stream_.is_open()) {
        stream_.open(path, std::ios::binary);
        if (!stream_) fail("cannot open input file '{}'", path);
        line_ = 0;
      }
      // The carried partial line, then a chunk; complete lines are items.
      const size_t at = b.text.size();
      b.text += carry_;
      carry_.clear();
      const size_t chunk = std::max<size_t>(bytes - std::min(bytes, b.text.size()), 1 << 16);
      b.text.resize(b.text.size() + chunk);
      stream_.read(b.text.data() + b.text.size() - chunk, std::streamsize(chunk));
      const size_t got = size_t(stream_.gcount());
      b.text.resize(b.text.size() - chunk + got);
      read_ += int64_t(got);
      if (stream_.bad()) fail("error reading input file '{}' after line {}", path, line_);
      const bool at_end = got < chunk;
      size_t line_start = at;
      while (line_start < b.text.size()) {
        const void* nl = std::memchr(b.text.data() + line_start, '\n', b.text.size() - line_start);
        if (!nl && !at_end) break;
        const size_t line_end =
            nl ? size_t(static_cast<const char*>(nl) - b.text.data()) : b.text.size();
        ++line_;
        const auto first = b.text.find_first_not_of(" \t\r", line_start);
        if (first < line_end) b.items.push_back({line_start, line_end, file_, line_});
        line_start = line_end + 1;
      }
      if (line_start < b.text.size()) {
        carry_.assign(b.text, line_start);
        b.text.resize(line_start);
      }
      if (at_end) {
        stream_.close();
        ++file_;
      }
    }
    return b;
  }

 private:
  const std::vector<std::string>& inputs_;
  std::vector<bool> jsonl_;
  size_t file_ = 0;
  std::ifstream stream_;
  std::string carry_;
  int64_t line_ = 0, read_ = 0, total_ = 0;
};

// The documents of items [begin, end), per key, encoded as `dtype`.
encoded_block encode_range(const block& b, size_t begin, size_t end, const prepare_options& o,
                           const tokenizer& tok, index_dtype dtype) {
  const size_t keys = o.json_keys.size();
  encoded_block out;
  out.bytes.resize(keys);
  out.sizes.resize(keys);
  const auto eod = tok.eod();
  auto add = [&](size_t key, std::string_view text, const item& it) {
    std::vector<int32_t> ids = tok.encode(text);
    if (o.append_eod && !ids.empty()) ids.push_back(*eod);
    if (key == 0) out.tokens += int64_t(ids.size());
    const size_t before = out.bytes[key].size();
    try {
      encode_tokens(dtype, ids, out.bytes[key]);
    } catch (const error& e) {
      fail("input file '{}'{}: {}", o.inputs[it.file],
           it.line ? fmt::format(" line {}", it.line) : std::string(), e.what());
    }
    out.sizes[key].push_back(out.bytes[key].size() - before);
  };
  for (size_t i = begin; i < end; ++i) {
    const item& it = b.items[i];
    const std::string_view text(b.text.data() + it.begin, it.end - it.begin);
    if (it.line == 0) {
      add(0, text, it);
      continue;
    }
    const std::string& path = o.inputs[it.file];
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception& e) {
      fail("input file '{}' line {}: not JSON ({})", path, it.line, e.what());
    }
    if (!j.is_object()) fail("input file '{}' line {}: not a JSON object", path, it.line);
    for (size_t k = 0; k < keys; ++k) {
      const auto found = j.find(o.json_keys[k]);
      if (found == j.end())
        fail("input file '{}' line {}: key '{}' (--json-keys) is missing", path, it.line,
             o.json_keys[k]);
      if (!found->is_string())
        fail("input file '{}' line {}: key '{}' is not a string", path, it.line, o.json_keys[k]);
      add(k, found->get_ref<const std::string&>(), it);
    }
  }
  return out;
}

// Splits the block between `workers` threads by bytes; the parts in order.
std::vector<encoded_block> encode_block(const block& b, const prepare_options& o,
                                        const tokenizer& tok, index_dtype dtype) {
  const size_t n = b.items.size();
  const size_t parts = std::min<size_t>(size_t(std::max(1, o.workers)), n);
  std::vector<size_t> bounds{0};
  for (size_t i = 0; i < n && bounds.size() < parts; ++i)
    if ((b.items[i].end + 1) * parts >= b.text.size() * bounds.size()) bounds.push_back(i + 1);
  bounds.push_back(n);
  std::vector<std::future<encoded_block>> futures;
  for (size_t p = 0; p + 2 < bounds.size(); ++p)
    futures.push_back(std::async(std::launch::async, encode_range, std::cref(b), bounds[p],
                                 bounds[p + 1], std::cref(o), std::cref(tok), dtype));
  // The last part on this thread.
  encoded_block last = encode_range(b, bounds[bounds.size() - 2], n, o, tok, dtype);
  std::vector<encoded_block> out;
  for (auto& f : futures) out.push_back(f.get());
  out.push_back(std::move(last));
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
  auto write = [&](std::vector<encoded_block> parts) {
    for (const auto& part : parts) {
      for (size_t k = 0; k < writers.size(); ++k)
        writers[k]->add_encoded_documents(part.bytes[k], part.sizes[k]);
      result.totals.tokens += part.tokens;
    }
    result.totals.documents = writers[0]->documents();
    result.totals.bytes_read = reader.bytes_read();
    result.totals.seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (o.progress) o.progress(result.totals);
  };
  // Block k is tokenized while block k - 1 is written and block k + 1 read.
  const size_t block_bytes = kBlockBytesPerWorker * size_t(o.workers);
  std::future<std::vector<encoded_block>> pending;
  auto current = std::make_shared<block>(reader.next(block_bytes));
  while (!current->items.empty() || !current->text.empty()) {
    auto next = std::async(std::launch::async, [current, &o, &tok, dtype] {
      return encode_block(*current, o, tok, dtype);
    });
    if (pending.valid()) write(pending.get());
    current = std::make_shared<block>(reader.next(block_bytes));
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
