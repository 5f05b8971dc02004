#include "model/safetensors.hpp"

#include <deque>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/checksum.hpp"
#include "core/error.hpp"
#include "core/files.hpp"

namespace merak::model {
namespace {

using json = nlohmann::json;
constexpr const char* kCrcKey = "merak.crc32c";
// The checksum's value: "v2:" and the CRC-32C of the whole file with these
// 8 hex digits read as zeros (header and data); a value of 8 hex digits
// alone is an older file's CRC of the data section only.
constexpr const char* kCrcPrefix = "v2:";
constexpr const char* kCrcPlaceholder = "v2:00000000";
constexpr uint64_t kMaxHeader = 100u << 20;
// Elements of one tensor, at most (its bytes must still fit in memory).
constexpr uint64_t kMaxElements = uint64_t{1} << 40;

// Where the 8 hex digits of the checksum sit in a header's text (after the
// "v2:" of its value), or npos.
size_t checksum_digits(const std::string& h) {
  const std::string key = fmt::format("\"{}\":\"{}", kCrcKey, kCrcPrefix);
  const size_t at = h.find(key);
  return at == std::string::npos ? at : at + key.size();
}

// A shape entry: a whole number of elements, not negative.
shape_t parse_shape(const json& j, const std::string& where) {
  if (!j.is_array()) fail("{}: shape is not a list", where);
  shape_t shape;
  uint64_t count = 1;
  for (auto& d : j) {
    if (!d.is_number_unsigned())
      fail("{}: shape entry {} is not a whole number of elements", where, d.dump());
    const uint64_t v = d.get<uint64_t>();
    if (v > kMaxElements || (v > 0 && count > kMaxElements / v))
      fail("{}: shape {} holds more than {} elements", where, j.dump(), kMaxElements);
    count *= v;
    shape.push_back(int64_t(v));
  }
  return shape;
}

// The element types a file may hold: merak's, and IEEE half precision
// (read only, widened to F32).
enum class stored_type { f32, i32, bf16, f16 };

stored_type parse_dtype(const std::string& s, const std::string& where, bool f16_allowed) {
  if (s == "F32") return stored_type::f32;
  if (s == "I32") return stored_type::i32;
  if (s == "BF16") return stored_type::bf16;
  if (s == "F16" && f16_allowed) return stored_type::f16;
  fail("{}: unsupported dtype '{}' (merak reads F32, I32 and BF16{})", where, s,
       f16_allowed ? " and F16" : "");
}

uint64_t stored_size(stored_type t) {
  return t == stored_type::f32 || t == stored_type::i32 ? 4 : 2;
}

// IEEE 754 binary16 to float, exactly (subnormals, infinities and NaN
// included).
float half_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exponent = (h >> 10) & 0x1Fu, mantissa = h & 0x3FFu, bits;
  if (exponent == 0x1F) {
    bits = sign | 0x7F800000u | (mantissa << 13);
  } else if (exponent != 0) {
    bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {
    bits = sign;
  } else {  // subnormal: normalise
    exponent = 113;
    while (!(mantissa & 0x400u)) {
      mantissa <<= 1;
      --exponent;
    }
    bits = sign | (exponent << 23) | ((mantissa & 0x3FFu) << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// The tensor of `shape` stored at `src` as `type`, widened to F32 where asked.
tensor load_tensor(const char* src, stored_type type, const shape_t& shape, bool widen) {
  if (type == stored_type::f32 || type == stored_type::i32 ||
      (type == stored_type::bf16 && !widen)) {
    tensor t(shape, type == stored_type::f32   ? dtype::f32
                    : type == stored_type::i32 ? dtype::i32
                                               : dtype::bf16);
    if (t.bytes()) std::memcpy(t.raw(), src, t.bytes());
    return t;
  }
  tensor t(shape, dtype::f32);
  float* out = t.f32();
  for (int64_t i = 0; i < t.numel(); ++i) {
    uint16_t v;
    std::memcpy(&v, src + 2 * i, 2);
    if (type == stored_type::f16) {
      out[i] = half_to_float(v);
    } else {
      const uint32_t bits = uint32_t(v) << 16;
      std::memcpy(&out[i], &bits, 4);
    }
  }
  return t;
}

}  // namespace

void write_safetensors(const std::string& path,
                       const std::vector<std::pair<std::string, const tensor*>>& on_devices,
                       const std::map<std::string, std::string>& metadata) {
  // Tensors on a device are written from host copies.
  std::deque<tensor> host;
  std::vector<std::pair<std::string, const tensor*>> tensors;
  for (auto& [name, t] : on_devices)
    tensors.emplace_back(
        name, t->where().type == device::kind::cpu ? t : &host.emplace_back(t->to(device::cpu())));
  json header = json::object();
  uint64_t offset = 0;
  for (auto& [name, t] : tensors) {
    if (name == "__metadata__") fail("tensor name '__metadata__' is reserved");
    header[name] = {{"dtype", dtype_name(t->type())},
                    {"shape", t->shape()},
                    {"data_offsets", {offset, offset + t->bytes()}}};
    offset += t->bytes();
  }
  json meta = json::object();
  for (auto& [k, v] : metadata)
    if (k != kCrcKey) meta[k] = v;
  meta[kCrcKey] = kCrcPlaceholder;
  header["__metadata__"] = meta;
  std::string h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');  // align the data section to 8 bytes
  uint64_t n = h.size();
  unsigned char len[8];
  for (int i = 0; i < 8; ++i) len[i] = (n >> (8 * i)) & 0xFF;
  // The checksum covers the length, the header (its own digits as zeros)
  // and the data, so a header edit is caught as well as a flipped data bit.
  const size_t digits = checksum_digits(h);
  uint32_t whole = crc32c(len, 8);
  whole = crc32c(h.data(), h.size(), whole);
  for (auto& [name, t] : tensors) whole = crc32c(t->raw(), t->bytes(), whole);
  const std::string hex = fmt::format("{:08x}", whole);
  h.replace(digits, 8, hex);
  write_file_atomic(path, [&](int fd, const std::string& tmp) {
    write_all(fd, len, 8, tmp);
    write_all(fd, h.data(), h.size(), tmp);
    for (auto& [name, t] : tensors) write_all(fd, t->raw(), t->bytes(), tmp);
  });
}

safetensors_file read_safetensors(const std::string& path,
                                  const safetensors_read_options& options) {
  check_input_file(path, "checkpoint file");
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  if (!f) fail("cannot open checkpoint file '{}'", path);
  const uint64_t file_size = uint64_t(f.tellg());
  f.seekg(0);
  if (file_size < 8) fail("'{}' is truncated ({} bytes, not a safetensors file)", path, file_size);
  unsigned char len[8];
  if (!f.read(reinterpret_cast<char*>(len), 8)) fail("'{}': cannot read its first 8 bytes", path);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= uint64_t(len[i]) << (8 * i);
  if (n > kMaxHeader || 8 + n > file_size)
    fail("'{}': header length {} does not fit the file ({} bytes): truncated or not safetensors",
         path, n, file_size);
  std::string h(n, '\0');
  if (!f.read(h.data(), std::streamsize(n))) fail("'{}': cannot read its {}-byte header", path, n);
  json header;
  try {
    header = json::parse(h);
  } catch (const json::exception& e) {
    fail("'{}': header is not valid JSON: {}", path, e.what());
  }
  if (!header.is_object()) fail("'{}': header is not a JSON object", path);
  const uint64_t data_size = file_size - 8 - n;
  safetensors_file out;
  std::string expected_crc;
  if (auto it = header.find("__metadata__"); it != header.end()) {
    if (!it->is_object()) fail("'{}': field __metadata__ is not an object", path);
    for (auto& [k, v] : it->items()) {
      if (!v.is_string()) fail("'{}': metadata field '{}' is not a string", path, k);
      if (k == kCrcKey)
        expected_crc = v.get<std::string>();
      else
        out.metadata[k] = v.get<std::string>();
    }
  }
  std::vector<char> data(data_size);
  f.read(data.data(), std::streamsize(data_size));
  if (!f) fail("'{}': cannot read {} bytes of tensor data", path, data_size);
  for (auto& [name, desc] : header.items()) {
    if (name == "__metadata__" || (options.skip && options.skip(name))) continue;
    auto where = fmt::format("'{}': tensor '{}'", path, name);
    try {
      if (!desc.is_object()) fail("{}: its description is not an object", where);
      auto type = parse_dtype(desc.at("dtype").get<std::string>(), where, options.widen_to_f32);
      auto shape = parse_shape(desc.at("shape"), where);
      auto off = desc.at("data_offsets").get<std::vector<uint64_t>>();
      if (off.size() != 2 || off[0] > off[1] || off[1] > data_size)
        fail("{}: data_offsets [{}, {}] lie outside the data section ({} bytes): truncated file?",
             where, off.size() > 0 ? off[0] : 0, off.size() > 1 ? off[1] : 0, data_size);
      uint64_t bytes = stored_size(type);
      for (int64_t d : shape) bytes *= uint64_t(d);  // bounded by parse_shape
      if (off[1] - off[0] != bytes)                  // checked before anything is allocated
        fail("{}: shape {} needs {} bytes but data_offsets span {}", where, shape_str(shape), bytes,
             off[1] - off[0]);
      out.tensors.emplace(name,
                          load_tensor(data.data() + off[0], type, shape, options.widen_to_f32));
    } catch (const json::exception& e) {
      fail("{}: bad field: {}", where, e.what());
    }
  }
  // Every field is in range (sizes checked against the file before any
  // allocation); now the checksum (unless --skip-checksum), then the values.
  if (!verify_checksums() || (expected_crc.empty() && !options.require_checksum)) {
    // Skipped on request, or a file of another writer: the structural checks
    // above and the values below still hold.
  } else if (expected_crc.empty())
    fail(
        "'{}' has no {} checksum in its metadata: not written by merak, or its header was "
        "edited (--skip-checksum loads it anyway)",
        path, kCrcKey);
  else if (expected_crc.rfind(kCrcPrefix, 0) == 0) {
    const size_t digits = checksum_digits(h);
    if (digits == std::string::npos || digits + 8 > h.size())
      fail("'{}': its checksum is not where merak writes it", path);
    std::string zeroed = h;
    zeroed.replace(digits, 8, "00000000");
    uint32_t whole = crc32c(len, 8);
    whole = crc32c(zeroed.data(), zeroed.size(), whole);
    whole = crc32c(data.data(), data.size(), whole);
    const auto actual = fmt::format("{}{:08x}", kCrcPrefix, whole);
    if (actual != expected_crc)
      fail(
          "'{}' is corrupted: checksum {} does not match the recorded {} (--skip-checksum loads "
          "it anyway)",
          path, actual, expected_crc);
  } else {
    auto actual = fmt::format("{:08x}", crc32c(data.data(), data.size()));
    if (actual != expected_crc)
      fail(
          "'{}' is corrupted: checksum {} does not match the recorded {} (--skip-checksum loads "
          "it anyway)",
          path, actual, expected_crc);
  }
  for (auto& [name, t] : out.tensors) {
    if (t.type() != dtype::f32) continue;
    const float* v = t.f32();
    for (int64_t i = 0; i < t.numel(); ++i)
      if (!std::isfinite(v[i]))
        fail("'{}': tensor '{}': element {} is {} (a checkpoint holds finite numbers only)", path,
             name, i, v[i]);
  }
  return out;
}

}  // namespace merak::model
