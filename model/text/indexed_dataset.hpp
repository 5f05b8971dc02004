#pragma once
// Megatron-LM's indexed dataset, MMIDIDX version 1 (the layout is written
// down in docs/datasets.md): PREFIX.idx holds the dtype, the sequence
// lengths, their byte offsets in PREFIX.bin and the document index;
// PREFIX.bin holds the tokens. The reader maps both files and checks every
// field against the file sizes before it is used; the writer streams
// documents to PREFIX.bin and writes PREFIX.idx at the end.

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "model/text/document_source.hpp"
#include "model/text/mapped_file.hpp"

namespace merak::model::text {

// Megatron's dtype codes (DType in indexed_dataset.py).
enum class index_dtype : uint8_t {
  u8 = 1,
  i8 = 2,
  i16 = 3,
  i32 = 4,
  i64 = 5,
  f64 = 6,
  f32 = 7,
  u16 = 8,
};

// Bytes of one element; "uint8", "int8", ..., Megatron's numpy names.
size_t dtype_bytes(index_dtype t);
std::string_view dtype_name(index_dtype t);
// The smallest dtype Megatron picks for a vocabulary: uint16 below 65500
// ids, else int32.
index_dtype dtype_for_vocab(int64_t vocab);

// Appends `ids` to `out` as `dtype` (little-endian). Fails naming the first
// id the dtype cannot hold and its position in `ids` (a float dtype holds
// none). Thread-safe: data prepare's workers encode, the writer appends.
void encode_tokens(index_dtype dtype, std::span<const int32_t> ids, std::vector<uint8_t>& out);

std::string index_path(const std::string& prefix);  // PREFIX.idx
std::string data_path(const std::string& prefix);   // PREFIX.bin

class indexed_dataset final : public document_source {
 public:
  // Maps PREFIX.idx and PREFIX.bin. Throws merak::error naming the file,
  // the field and its byte offset for: a short file, a bad magic, a version
  // other than 1, an unknown or floating-point dtype, counts the file cannot
  // hold, a negative length, a sequence past the end of PREFIX.bin, or a
  // document index that does not run from 0 up to the sequence count.
  explicit indexed_dataset(const std::string& prefix);

  index_dtype dtype() const { return dtype_; }
  int64_t sequences() const { return sequences_; }
  int64_t sequence_length(int64_t i) const;   // tokens
  int64_t sequence_pointer(int64_t i) const;  // byte offset in PREFIX.bin
  // Entry `i` of the document index, 0 <= i <= documents(): the first
  // sequence of document i (entry documents() is sequences()).
  int64_t document_start(int64_t i) const;
  int64_t total_tokens() const { return total_tokens_; }

  int64_t documents() const override { return documents_; }
  int64_t document_tokens(int64_t d) const override;
  void read(int64_t d, int64_t offset, int64_t count, int32_t* out, int64_t vocab) const override;
  const std::string& name() const override { return prefix_; }

 private:
  void check_header();
  void check_sequences();
  void check_document_index();
  // Token `k` of sequence `i` as an integer (dtype-converted).
  int64_t token(int64_t i, int64_t k) const;

  std::string prefix_;
  mapped_file idx_, bin_;
  index_dtype dtype_ = index_dtype::u16;
  int64_t sequences_ = 0, documents_ = 0, total_tokens_ = 0;
  size_t lengths_at_ = 0, pointers_at_ = 0, documents_at_ = 0;  // byte offsets in PREFIX.idx
};

// Writes PREFIX.bin and PREFIX.idx. Documents stream to PREFIX.bin.tmp;
// finish() replaces PREFIX.bin by it and writes PREFIX.idx atomically (an
// old PREFIX.idx is removed first, so that a crash never leaves an index
// beside tokens it does not describe). Not thread-safe.
class indexed_dataset_writer {
 public:
  // Fails naming the path when PREFIX.bin.tmp cannot be created.
  indexed_dataset_writer(std::string prefix, index_dtype dtype);
  // Without finish(), removes the temporary file.
  ~indexed_dataset_writer();
  indexed_dataset_writer(const indexed_dataset_writer&) = delete;
  indexed_dataset_writer& operator=(const indexed_dataset_writer&) = delete;

  // Appends one document of one sequence. Fails naming the id and position
  // of an id the dtype cannot hold (a float dtype holds none).
  void add_document(std::span<const int32_t> ids);
  // Appends documents already encoded by encode_tokens for this dtype, back
  // to back in `bytes`, document i taking sizes[i] bytes (written straight
  // from `bytes`, without a copy).
  void add_encoded_documents(std::span<const uint8_t> bytes, std::span<const size_t> sizes);
  // Writes the index and puts both files in place. Fails naming the path.
  void finish();

  int64_t documents() const { return int64_t(lengths_.size()); }
  int64_t tokens() const { return tokens_; }

 private:
  void flush();
  void end_document(int64_t tokens);

  std::string prefix_, tmp_;
  index_dtype dtype_;
  int fd_ = -1;
  std::vector<uint8_t> buffer_;
  std::vector<int32_t> lengths_;
  int64_t tokens_ = 0;
  bool finished_ = false;
};

}  // namespace merak::model::text
