#include "model/safetensors.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/checksum.hpp"
#include "core/error.hpp"

namespace merak::model {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
constexpr const char* kCrcKey = "merak.crc32c";
constexpr uint64_t kMaxHeader = 100u << 20;

// Owns a file descriptor.
class file_handle {
 public:
  explicit file_handle(int fd) : fd_(fd) {}
  ~file_handle() {
    if (fd_ >= 0) ::close(fd_);
  }
  file_handle(const file_handle&) = delete;
  file_handle& operator=(const file_handle&) = delete;
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

void write_all(int fd, const void* data, size_t n, const std::string& path) {
  auto p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      fail("cannot write '{}': {}", path, std::strerror(errno));
    }
    p += w;
    n -= size_t(w);
  }
}

// Writes through `fill(fd)` into path.tmp, fsyncs and renames onto path.
template <typename Fill>
void atomic_write(const std::string& path, Fill&& fill) {
  std::string tmp = path + ".tmp";
  file_handle fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (fd.get() < 0) fail("cannot create '{}': {}", tmp, std::strerror(errno));
  try {
    fill(fd.get(), tmp);
    if (::fsync(fd.get()) != 0) fail("cannot fsync '{}': {}", tmp, std::strerror(errno));
    if (::close(fd.release()) != 0) fail("cannot close '{}': {}", tmp, std::strerror(errno));
    if (::rename(tmp.c_str(), path.c_str()) != 0)
      fail("cannot rename '{}' to '{}': {}", tmp, path, std::strerror(errno));
  } catch (...) {
    ::unlink(tmp.c_str());
    throw;
  }
  auto parent = fs::path(path).parent_path();
  fsync_directory(parent.empty() ? "." : parent.string());
}

dtype parse_dtype(const std::string& s, const std::string& where) {
  if (s == "F32") return dtype::f32;
  if (s == "I32") return dtype::i32;
  fail("{}: unsupported dtype '{}' (merak reads F32 and I32)", where, s);
}

}  // namespace

void fsync_directory(const std::string& dir) {
  file_handle fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd.get() < 0) fail("cannot open directory '{}': {}", dir, std::strerror(errno));
  if (::fsync(fd.get()) != 0) fail("cannot fsync directory '{}': {}", dir, std::strerror(errno));
}

void write_file_atomic(const std::string& path, const std::string& content) {
  atomic_write(path, [&](int fd, const std::string& tmp) {
    write_all(fd, content.data(), content.size(), tmp);
  });
}

void write_safetensors(const std::string& path,
                       const std::vector<std::pair<std::string, const tensor*>>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  json header = json::object();
  uint64_t offset = 0;
  uint32_t crc = 0;
  for (auto& [name, t] : tensors) {
    if (name == "__metadata__") fail("tensor name '__metadata__' is reserved");
    header[name] = {{"dtype", dtype_name(t->type())},
                    {"shape", t->shape()},
                    {"data_offsets", {offset, offset + t->bytes()}}};
    offset += t->bytes();
    crc = crc32c(t->raw(), t->bytes(), crc);
  }
  json meta = json::object();
  for (auto& [k, v] : metadata) meta[k] = v;
  meta[kCrcKey] = fmt::format("{:08x}", crc);
  header["__metadata__"] = meta;
  std::string h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');  // align the data section to 8 bytes
  atomic_write(path, [&](int fd, const std::string& tmp) {
    uint64_t n = h.size();
    unsigned char len[8];
    for (int i = 0; i < 8; ++i) len[i] = (n >> (8 * i)) & 0xFF;
    write_all(fd, len, 8, tmp);
    write_all(fd, h.data(), h.size(), tmp);
    for (auto& [name, t] : tensors) write_all(fd, t->raw(), t->bytes(), tmp);
  });
}

safetensors_file read_safetensors(const std::string& path) {
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  if (!f) fail("cannot open checkpoint file '{}'", path);
  const uint64_t file_size = uint64_t(f.tellg());
  f.seekg(0);
  if (file_size < 8) fail("'{}' is truncated ({} bytes, not a safetensors file)", path, file_size);
  unsigned char len[8];
  f.read(reinterpret_cast<char*>(len), 8);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= uint64_t(len[i]) << (8 * i);
  if (n > kMaxHeader || 8 + n > file_size)
    fail("'{}': header length {} does not fit the file ({} bytes): truncated or not safetensors",
         path, n, file_size);
  std::string h(n, '\0');
  f.read(h.data(), std::streamsize(n));
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
  uint64_t covered = 0;
  for (auto& [name, desc] : header.items()) {
    if (name == "__metadata__") continue;
    auto where = fmt::format("'{}': tensor '{}'", path, name);
    try {
      auto type = parse_dtype(desc.at("dtype").get<std::string>(), where);
      auto shape = desc.at("shape").get<shape_t>();
      auto off = desc.at("data_offsets").get<std::vector<uint64_t>>();
      if (off.size() != 2 || off[0] > off[1] || off[1] > data_size)
        fail("{}: data_offsets [{}, {}] lie outside the data section ({} bytes): truncated file?",
             where, off.size() > 0 ? off[0] : 0, off.size() > 1 ? off[1] : 0, data_size);
      tensor t(shape, type);
      if (off[1] - off[0] != t.bytes())
        fail("{}: shape {} needs {} bytes but data_offsets span {}", where, shape_str(shape),
             t.bytes(), off[1] - off[0]);
      if (t.bytes()) std::memcpy(t.raw(), data.data() + off[0], t.bytes());
      covered = std::max(covered, off[1]);
      out.tensors.emplace(name, std::move(t));
    } catch (const json::exception& e) {
      fail("{}: bad field: {}", where, e.what());
    }
  }
  if (!expected_crc.empty()) {
    auto actual = fmt::format("{:08x}", crc32c(data.data(), data.size()));
    if (actual != expected_crc)
      fail("'{}' is corrupted: checksum {} does not match the recorded {}", path, actual,
           expected_crc);
  }
  return out;
}

}  // namespace merak::model
