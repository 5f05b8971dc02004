#include "model/text/indexed_dataset.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>

#include "core/error.hpp"
#include "core/files.hpp"

namespace merak::model::text {
namespace {

constexpr char kMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};
constexpr size_t kVersionAt = 9, kDtypeAt = 17, kSequencesAt = 18, kDocumentsAt = 26;
constexpr size_t kHeaderBytes = 34;

template <typename T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);  // the index's arrays are not aligned
  return v;
}

// Writes `v` at out[at] and moves `at` past it.
template <typename T>
void store(std::vector<uint8_t>& out, size_t& at, T v) {
  std::memcpy(out.data() + at, &v, sizeof v);
  at += sizeof v;
}

bool known_dtype(uint8_t code) {
  return code >= 1 && code <= 8;
}

bool float_dtype(index_dtype t) {
  return t == index_dtype::f32 || t == index_dtype::f64;
}

// The range of ids a dtype holds, as int64.
std::pair<int64_t, int64_t> dtype_range(index_dtype t) {
  switch (t) {
    case index_dtype::u8:
      return {0, 255};
    case index_dtype::i8:
      return {-128, 127};
    case index_dtype::i16:
      return {-32768, 32767};
    case index_dtype::u16:
      return {0, 65535};
    case index_dtype::i32:
    case index_dtype::i64:
      return {std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max()};
    default:
      return {1, 0};  // floats: none
  }
}

}  // namespace

size_t dtype_bytes(index_dtype t) {
  switch (t) {
    case index_dtype::u8:
    case index_dtype::i8:
      return 1;
    case index_dtype::i16:
    case index_dtype::u16:
      return 2;
    case index_dtype::i32:
    case index_dtype::f32:
      return 4;
    case index_dtype::i64:
    case index_dtype::f64:
      return 8;
  }
  return 0;
}

std::string_view dtype_name(index_dtype t) {
  switch (t) {
    case index_dtype::u8:
      return "uint8";
    case index_dtype::i8:
      return "int8";
    case index_dtype::i16:
      return "int16";
    case index_dtype::i32:
      return "int32";
    case index_dtype::i64:
      return "int64";
    case index_dtype::f64:
      return "float64";
    case index_dtype::f32:
      return "float32";
    case index_dtype::u16:
      return "uint16";
  }
  return "unknown";
}

index_dtype dtype_for_vocab(int64_t vocab) {
  return vocab < 65500 ? index_dtype::u16 : index_dtype::i32;
}

std::string index_path(const std::string& prefix) {
  return prefix + ".idx";
}
std::string data_path(const std::string& prefix) {
  return prefix + ".bin";
}

// ---- reader ----------------------------------------------------------------

indexed_dataset::indexed_dataset(const std::string& prefix)
    : prefix_(prefix),
      idx_(index_path(prefix), "index file"),
      bin_(data_path(prefix), "token file") {
  check_header();
  check_sequences();
  check_document_index();
}

void indexed_dataset::check_header() {
  const std::string& f = idx_.path();
  const uint8_t* p = idx_.bytes().data();
  if (idx_.size() < kHeaderBytes)
    fail("index file '{}' is {} bytes: too short for the {}-byte header", f, idx_.size(),
         kHeaderBytes);
  if (std::memcmp(p, kMagic, sizeof kMagic) != 0)
    fail("index file '{}': magic at byte 0 is not MMIDIDX (not a Megatron indexed dataset)", f);
  const auto version = load<uint64_t>(p + kVersionAt);
  if (version != 1)
    fail("index file '{}': version {} at byte {} is not supported (expected 1)", f, version,
         kVersionAt);
  const uint8_t code = p[kDtypeAt];
  if (!known_dtype(code))
    fail("index file '{}': dtype code {} at byte {} is unknown (expected 1 to 8)", f, code,
         kDtypeAt);
  dtype_ = index_dtype(code);
  if (float_dtype(dtype_))
    fail("index file '{}': dtype {} (code {}) at byte {} holds no token ids", f, dtype_name(dtype_),
         code, kDtypeAt);
  const auto seqs = load<uint64_t>(p + kSequencesAt);
  const auto docs_plus_one = load<uint64_t>(p + kDocumentsAt);
  // Each sequence takes 12 bytes (length and pointer), each document-index
  // entry 8: counts are checked against the file before any arithmetic on them.
  const uint64_t room = idx_.size() - kHeaderBytes;
  if (seqs > room / 12)
    fail("index file '{}': sequence count {} at byte {} needs more than the file's {} bytes", f,
         seqs, kSequencesAt, idx_.size());
  if (docs_plus_one > (room - seqs * 12) / 8)
    fail("index file '{}': document count + 1 = {} at byte {} needs more than the file's {} bytes",
         f, docs_plus_one, kDocumentsAt, idx_.size());
  if (docs_plus_one < 1)
    fail("index file '{}': document count + 1 at byte {} is 0 (the index has at least one entry)",
         f, kDocumentsAt);
  const uint64_t expected = kHeaderBytes + seqs * 12 + docs_plus_one * 8;
  if (expected != idx_.size())
    fail("index file '{}' is {} bytes but its counts ({} sequences, {} documents) describe {}", f,
         idx_.size(), seqs, docs_plus_one - 1, expected);
  sequences_ = int64_t(seqs);
  documents_ = int64_t(docs_plus_one) - 1;
  lengths_at_ = kHeaderBytes;
  pointers_at_ = lengths_at_ + size_t(seqs) * 4;
  documents_at_ = pointers_at_ + size_t(seqs) * 8;
}

void indexed_dataset::check_sequences() {
  const std::string& f = idx_.path();
  const int64_t item = int64_t(dtype_bytes(dtype_));
  const int64_t bin_size = int64_t(bin_.size());
  for (int64_t i = 0; i < sequences_; ++i) {
    const int64_t len = sequence_length(i), ptr = sequence_pointer(i);
    if (len < 0)
      fail("index file '{}': sequence {}'s length {} at byte {} is negative", f, i, len,
           lengths_at_ + size_t(i) * 4);
    if (ptr < 0 || ptr > bin_size || len > (bin_size - ptr) / item)
      fail(
          "index file '{}': sequence {}'s pointer {} at byte {} with its {} tokens of {} bytes "
          "runs past the end of '{}' ({} bytes)",
          f, i, ptr, pointers_at_ + size_t(i) * 8, len, item, bin_.path(), bin_size);
    if (__builtin_add_overflow(total_tokens_, len, &total_tokens_))
      fail("index file '{}': the sequence lengths up to sequence {} overflow a 64-bit count", f, i);
  }
}

void indexed_dataset::check_document_index() {
  const std::string& f = idx_.path();
  int64_t previous = 0;
  for (int64_t i = 0; i <= documents_; ++i) {
    const int64_t v = document_start(i);
    const size_t at = documents_at_ + size_t(i) * 8;
    if (i == 0 && v != 0)
      fail("index file '{}': document index entry 0 at byte {} is {} (expected 0)", f, at, v);
    if (v < previous || v > sequences_)
      fail(
          "index file '{}': document index entry {} at byte {} is {} (entries rise from 0 to the "
          "sequence count {})",
          f, i, at, v, sequences_);
    previous = v;
  }
  if (previous != sequences_)
    fail(
        "index file '{}': the last document index entry at byte {} is {}, not the sequence count "
        "{}",
        f, documents_at_ + size_t(documents_) * 8, previous, sequences_);
}

int64_t indexed_dataset::sequence_length(int64_t i) const {
  return load<int32_t>(idx_.bytes().data() + lengths_at_ + size_t(i) * 4);
}

int64_t indexed_dataset::sequence_pointer(int64_t i) const {
  return load<int64_t>(idx_.bytes().data() + pointers_at_ + size_t(i) * 8);
}

int64_t indexed_dataset::document_start(int64_t i) const {
  return load<int64_t>(idx_.bytes().data() + documents_at_ + size_t(i) * 8);
}

int64_t indexed_dataset::document_tokens(int64_t d) const {
  MERAK_CHECK(d >= 0 && d < documents_, "document {} of {}", d, documents_);
  int64_t n = 0;
  for (int64_t s = document_start(d); s < document_start(d + 1); ++s) n += sequence_length(s);
  return n;
}

int64_t indexed_dataset::token(int64_t i, int64_t k) const {
  const uint8_t* p = bin_.bytes().data() + sequence_pointer(i) + k * int64_t(dtype_bytes(dtype_));
  switch (dtype_) {
    case index_dtype::u8:
      return *p;
    case index_dtype::i8:
      return int8_t(*p);
    case index_dtype::i16:
      return load<int16_t>(p);
    case index_dtype::u16:
      return load<uint16_t>(p);
    case index_dtype::i32:
      return load<int32_t>(p);
    case index_dtype::i64:
      return load<int64_t>(p);
    default:
      MERAK_CHECK(false, "dtype {} holds no ids", dtype_name(dtype_));
  }
  return 0;
}

void indexed_dataset::read(int64_t d, int64_t offset, int64_t count, int32_t* out,
                           int64_t vocab) const {
  MERAK_CHECK(d >= 0 && d < documents_ && offset >= 0 && count >= 0, "read of document {}", d);
  int64_t s = document_start(d);
  const int64_t end = document_start(d + 1);
  for (; s < end && offset >= sequence_length(s); ++s) offset -= sequence_length(s);
  while (count > 0) {
    MERAK_CHECK(s < end, "read past document {} of '{}'", d, prefix_);
    const int64_t take = std::min(count, sequence_length(s) - offset);
    for (int64_t k = 0; k < take; ++k) {
      const int64_t id = token(s, offset + k);
      if (id < 0 || id >= vocab)
        fail("token file '{}': id {} at byte {} is outside the model's vocabulary [0, {})",
             bin_.path(), id, sequence_pointer(s) + (offset + k) * int64_t(dtype_bytes(dtype_)),
             vocab);
      *out++ = int32_t(id);
    }
    count -= take;
    offset = 0;
    ++s;
  }
}

// ---- writer ----------------------------------------------------------------

namespace {

template <typename T>
void encode_as(std::span<const int32_t> ids, std::vector<uint8_t>& out, int64_t lo, int64_t hi,
               index_dtype dtype) {
  const size_t at = out.size();
  out.resize(at + ids.size() * sizeof(T));
  uint8_t* p = out.data() + at;
  for (size_t i = 0; i < ids.size(); ++i) {
    const int64_t id = ids[i];
    if (id < lo || id > hi) {
      out.resize(at);
      fail("id {} at position {} does not fit dtype {}", id, i, dtype_name(dtype));
    }
    const T v = T(id);
    std::memcpy(p + i * sizeof(T), &v, sizeof(T));
  }
}

}  // namespace

void encode_tokens(index_dtype dtype, std::span<const int32_t> ids, std::vector<uint8_t>& out) {
  const auto [lo, hi] = dtype_range(dtype);
  switch (dtype) {
    case index_dtype::u8:
      return encode_as<uint8_t>(ids, out, lo, hi, dtype);
    case index_dtype::i8:
      return encode_as<int8_t>(ids, out, lo, hi, dtype);
    case index_dtype::i16:
      return encode_as<int16_t>(ids, out, lo, hi, dtype);
    case index_dtype::u16:
      return encode_as<uint16_t>(ids, out, lo, hi, dtype);
    case index_dtype::i32:
      return encode_as<int32_t>(ids, out, lo, hi, dtype);
    case index_dtype::i64:
      return encode_as<int64_t>(ids, out, lo, hi, dtype);
    default:
      fail("dtype {} holds no token ids", dtype_name(dtype));
  }
}

indexed_dataset_writer::indexed_dataset_writer(std::string prefix, index_dtype dtype)
    : prefix_(std::move(prefix)), tmp_(data_path(prefix_) + ".tmp"), dtype_(dtype) {
  check_output_file(data_path(prefix_), "token file");
  check_output_file(index_path(prefix_), "index file");
  ::unlink(tmp_.c_str());  // a stale one from a crashed run
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd_ < 0) fail("cannot create '{}': {}", tmp_, std::strerror(errno));
  buffer_.reserve(1 << 20);
}

indexed_dataset_writer::~indexed_dataset_writer() {
  if (fd_ >= 0) ::close(fd_);
  if (!finished_) ::unlink(tmp_.c_str());
}

void indexed_dataset_writer::add_document(std::span<const int32_t> ids) {
  MERAK_CHECK(!finished_, "add_document after finish");
  try {
    encode_tokens(dtype_, ids, buffer_);
  } catch (const error& e) {
    fail("'{}': document {}: {}", prefix_, lengths_.size(), e.what());
  }
  end_document(int64_t(ids.size()));
}

void indexed_dataset_writer::add_encoded_documents(std::span<const uint8_t> bytes,
                                                   std::span<const size_t> sizes) {
  MERAK_CHECK(!finished_, "add_encoded_documents after finish");
  const size_t item = dtype_bytes(dtype_);
  size_t total = 0;
  for (size_t size : sizes) {
    MERAK_CHECK(size % item == 0, "{} bytes of {}-byte ids", size, item);
    total += size;
  }
  MERAK_CHECK(total == bytes.size(), "sizes sum to {} of {} bytes", total, bytes.size());
  flush();
  write_all(fd_, bytes.data(), bytes.size(), tmp_);
  for (size_t size : sizes) end_document(int64_t(size / item));
}

void indexed_dataset_writer::end_document(int64_t tokens) {
  if (tokens > int64_t(std::numeric_limits<int32_t>::max()))
    fail("'{}': document {} has {} tokens, more than a sequence length (int32) holds", prefix_,
         lengths_.size(), tokens);
  lengths_.push_back(int32_t(tokens));
  tokens_ += tokens;
  if (buffer_.size() >= (size_t(1) << 20)) flush();
}

void indexed_dataset_writer::flush() {
  write_all(fd_, buffer_.data(), buffer_.size(), tmp_);
  buffer_.clear();
}

void indexed_dataset_writer::finish() {
  MERAK_CHECK(!finished_, "finish twice");
  flush();
  if (::fsync(fd_) != 0) fail("cannot sync '{}': {}", tmp_, std::strerror(errno));
  ::close(fd_);
  fd_ = -1;
  const std::string idx = index_path(prefix_), bin = data_path(prefix_);
  if (::unlink(idx.c_str()) != 0 && errno != ENOENT)
    fail("cannot replace index file '{}': {}", idx, std::strerror(errno));
  if (::rename(tmp_.c_str(), bin.c_str()) != 0)
    fail("cannot rename '{}' to '{}': {}", tmp_, bin, std::strerror(errno));
  finished_ = true;
  const uint64_t seqs = lengths_.size();
  std::vector<uint8_t> out(kHeaderBytes + seqs * 20 + 8);
  std::memcpy(out.data(), kMagic, sizeof kMagic);
  size_t at = sizeof kMagic;
  store<uint64_t>(out, at, 1);
  store<uint8_t>(out, at, uint8_t(dtype_));
  store<uint64_t>(out, at, seqs);
  store<uint64_t>(out, at, seqs + 1);  // one sequence per document
  for (int32_t len : lengths_) store<int32_t>(out, at, len);
  int64_t pointer = 0;
  for (int32_t len : lengths_) {
    store<int64_t>(out, at, pointer);
    pointer += int64_t(len) * int64_t(dtype_bytes(dtype_));
  }
  for (uint64_t d = 0; d <= seqs; ++d) store<int64_t>(out, at, int64_t(d));
  MERAK_CHECK(at == out.size(), "index of {} bytes, {} written", out.size(), at);
  write_file_atomic(
      idx, [&](int fd, const std::string& tmp) { write_all(fd, out.data(), out.size(), tmp); });
}

}  // namespace merak::model::text
