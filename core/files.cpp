#include "core/files.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/checksum.hpp"
#include "core/error.hpp"

namespace merak {

void check_input_file(const std::string& path, const char* what) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const auto st = fs::status(path, ec);
  if (ec || st.type() == fs::file_type::not_found) return;
  if (st.type() == fs::file_type::directory) fail("{} '{}' is a directory", what, path);
  if (st.type() != fs::file_type::regular && st.type() != fs::file_type::fifo)
    fail("{} '{}' is not a regular file or a pipe", what, path);
  // A pipe's /proc/self/fd link has no path to resolve; a FIFO that has one
  // is a named FIFO, whose open blocks until some process opens it to write.
  if (st.type() == fs::file_type::fifo && !fs::canonical(path, ec).empty() && !ec)
    fail("{} '{}' is a named FIFO: give a regular file, or a pipe (standard input, <(...))", what,
         path);
}

namespace {

// What a path that is not a regular file is, in words.
const char* file_type_words(std::filesystem::file_type type) {
  using std::filesystem::file_type;
  switch (type) {
    case file_type::directory:
      return "a directory";
    case file_type::character:
      return "a character device";
    case file_type::block:
      return "a block device";
    case file_type::fifo:
      return "a FIFO";
    case file_type::socket:
      return "a socket";
    default:
      return "not a regular file";
  }
}

}  // namespace

void check_output_file(const std::string& path, const char* what) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const auto st = fs::status(path, ec);
  if (ec || st.type() == fs::file_type::not_found || st.type() == fs::file_type::regular) return;
  fail("{} '{}' is {}: only a regular file is written (it is left untouched)", what, path,
       file_type_words(st.type()));
}

namespace {

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
  int release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }

 private:
  int fd_;
};

// Creates `tmp` as a new file: never through a symbolic link planted there,
// never into an existing file (a stale one, left by a crash, is removed
// first: unlink removes a link itself, not its target).
int create_new(const std::string& tmp) {
  const int flags = O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC;
  int fd = ::open(tmp.c_str(), flags, 0644);
  if (fd < 0 && errno == EEXIST && ::unlink(tmp.c_str()) == 0)
    fd = ::open(tmp.c_str(), flags, 0644);
  if (fd < 0) fail("cannot create '{}': {}", tmp, std::strerror(errno));
  return fd;
}

}  // namespace

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

void write_file_atomic(const std::string& path,
                       const std::function<void(int fd, const std::string& tmp)>& fill) {
  check_output_file(path, "output");
  const std::string tmp = path + ".tmp";
  file_handle fd(create_new(tmp));
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
  const auto parent = std::filesystem::path(path).parent_path();
  fsync_directory(parent.empty() ? "." : parent.string());
}

void write_file_atomic(const std::string& path, const std::string& content) {
  write_file_atomic(path, [&](int fd, const std::string& tmp) {
    write_all(fd, content.data(), content.size(), tmp);
  });
}

namespace {
std::atomic<bool> verify_checksums_flag{true};
}

void set_verify_checksums(bool on) {
  verify_checksums_flag = on;
}
bool verify_checksums() {
  return verify_checksums_flag;
}

std::string crc_field(const std::string& text, size_t digits) {
  MERAK_CHECK(digits + 8 <= text.size(), "checksum digits at {} of {}", digits, text.size());
  uint32_t c = crc32c(text.data(), digits);
  c = crc32c("00000000", 8, c);
  c = crc32c(text.data() + digits + 8, text.size() - digits - 8, c);
  return fmt::format("crc32c:{:08x}", c);
}

void fsync_directory(const std::string& dir) {
  file_handle fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd.get() < 0) fail("cannot open directory '{}': {}", dir, std::strerror(errno));
  if (::fsync(fd.get()) != 0) fail("cannot fsync directory '{}': {}", dir, std::strerror(errno));
}

}  // namespace merak
