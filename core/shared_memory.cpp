#include "core/shared_memory.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdint>
#include <cstring>
#include <optional>
#include <random>
#include <sstream>
#include <utility>

#include "core/error.hpp"

namespace merak {
namespace {

void* map(int fd, size_t bytes, const std::string& name) {
  // Mapped in full at once: the first pass over a region does not fault
  // page by page.
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  const int err = errno;
  ::close(fd);
  if (p == MAP_FAILED) fail("shared memory '{}': mmap: {}", name, std::strerror(err));
  return p;
}

constexpr const char* kshm_root = "/dev/shm";

// The inode of this process's PID namespace (readlink of /proc/self/ns/pid
// reads "pid:[N]"); 0 where it cannot be read.
uint64_t pid_namespace() {
  char buf[64] = {};
  const ssize_t n = ::readlink("/proc/self/ns/pid", buf, sizeof buf - 1);
  const char* open = n > 0 ? std::strchr(buf, '[') : nullptr;
  return open ? std::strtoull(open + 1, nullptr, 10) : 0;
}

struct process_stat {
  char state = '?';
  uint64_t start = 0;  // clock ticks after boot
};

// Fields 3 (state) and 22 (start time) of /proc/PID/stat ("self" for this
// process); nullopt where it cannot be read, with errno saying why.
std::optional<process_stat> read_stat(const std::string& pid) {
  const int fd = ::open(("/proc/" + pid + "/stat").c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  std::string s(1024, '\0');
  const ssize_t n = ::read(fd, s.data(), s.size());
  const int err = errno;
  ::close(fd);
  errno = err;
  if (n <= 0) return std::nullopt;
  s.resize(size_t(n));
  const auto paren = s.rfind(')');  // the command name may hold spaces and ')'
  std::istringstream fields(paren == std::string::npos ? std::string() : s.substr(paren + 1));
  process_stat st;
  std::string skip;
  fields >> st.state;
  for (int f = 4; f < 22 && fields >> skip; ++f) {
  }
  const bool ok = bool(fields >> st.start);
  errno = ok ? 0 : EINVAL;  // EINVAL: not of the form expected
  if (!ok) return std::nullopt;
  return st;
}

// The owner named by a /dev/shm entry of process_scoped_name's form.
struct scoped_owner {
  long pid = 0;
  uint64_t start = 0;
  uint64_t ns = 0;
};

std::optional<scoped_owner> parse_scoped(std::string_view name) {
  constexpr std::string_view prefix = "merak-";
  if (name.substr(0, prefix.size()) != prefix) return std::nullopt;
  name.remove_prefix(prefix.size());
  size_t kind = 0;
  while (kind < name.size() && name[kind] >= 'a' && name[kind] <= 'z') ++kind;
  if (kind == 0) return std::nullopt;
  name.remove_prefix(kind);
  scoped_owner o;
  auto number = [&name](char tag, auto& value) {
    if (name.size() < 3 || name[0] != '-' || name[1] != tag) return false;
    const auto [end, ec] = std::from_chars(name.data() + 2, name.data() + name.size(), value);
    if (ec != std::errc() || end == name.data() + 2) return false;
    name.remove_prefix(size_t(end - name.data()));
    return true;
  };
  if (!number('p', o.pid) || !number('t', o.start) || !number('n', o.ns) || name.empty() ||
      name[0] != '-' || o.pid <= 0)
    return std::nullopt;
  return o;
}

// Whether `o`'s process has ended: no such process, a zombie, or another
// process under its pid (another start time). Unknown (no permission) reads
// as running.
bool ended(const scoped_owner& o) {
  errno = 0;
  const auto st = read_stat(std::to_string(o.pid));
  if (!st) return errno == ENOENT || errno == ESRCH;
  return st->state == 'Z' || st->state == 'X' || st->start != o.start;
}

// Removes directory `name` of `parent` and the files of this user in it
// (not following links); returns whether the directory went.
bool remove_directory(int parent, const char* name) {
  const int fd = ::openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return false;
  DIR* d = ::fdopendir(fd);
  if (!d) {
    ::close(fd);
    return false;
  }
  while (const dirent* e = ::readdir(d)) {
    struct stat st {};
    if (std::strcmp(e->d_name, ".") == 0 || std::strcmp(e->d_name, "..") == 0) continue;
    if (::fstatat(fd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && st.st_uid == ::geteuid() &&
        !S_ISDIR(st.st_mode))
      ::unlinkat(fd, e->d_name, 0);
  }
  ::closedir(d);
  return ::unlinkat(parent, name, AT_REMOVEDIR) == 0;
}

}  // namespace

std::string process_scoped_name(std::string_view kind, std::string_view tail) {
  const auto self = read_stat("self");
  return fmt::format("/merak-{}-p{}-t{}-n{}-{}", kind, ::getpid(), self ? self->start : 0,
                     pid_namespace(), tail);
}

int sweep_shared_memory() {
  try {
    if (!read_stat("self")) return 0;  // no /proc: no creator can be checked
    const uint64_t ns = pid_namespace();
    DIR* d = ::opendir(kshm_root);
    if (!d) return 0;
    const int fd = ::dirfd(d);
    int removed = 0;
    while (const dirent* e = ::readdir(d)) {
      const auto owner = parse_scoped(e->d_name);
      struct stat st {};
      if (!owner || owner->ns != ns || ::fstatat(fd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 ||
          st.st_uid != ::geteuid() || !ended(*owner))
        continue;
      if (S_ISREG(st.st_mode) && ::unlinkat(fd, e->d_name, 0) == 0) ++removed;
      if (S_ISDIR(st.st_mode) && remove_directory(fd, e->d_name)) ++removed;
    }
    ::closedir(d);
    return removed;
  } catch (const std::exception&) {
    return 0;
  }
}

shared_directory::shared_directory() {
  const std::string name = process_scoped_name(
      "job", fmt::format("{:016x}", std::random_device{}() * 0x9E3779B97F4A7C15ull));
  path_ = kshm_root + name;
  if (::mkdir(path_.c_str(), 0700) != 0) path_.clear();
}

shared_directory::~shared_directory() {
  if (path_.empty()) return;
  const auto slash = path_.rfind('/');
  const int parent = ::open(path_.substr(0, slash).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (parent < 0) return;
  remove_directory(parent, path_.c_str() + slash + 1);
  ::close(parent);
}

shared_region shared_region::create(const std::string& name, size_t bytes) {
  const int fd = ::shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) fail("shared memory '{}': cannot create it: {}", name, std::strerror(errno));
  if (::ftruncate(fd, off_t(bytes)) != 0) {
    const int err = errno;
    ::close(fd);
    ::shm_unlink(name.c_str());
    fail("shared memory '{}': cannot size it to {} bytes: {}", name, bytes, std::strerror(err));
  }
  // Take the memory now: a file system too small for it (a container's
  // /dev/shm) refuses here rather than with SIGBUS on a later write.
  if (const int err = ::posix_fallocate(fd, 0, off_t(bytes)); err != 0) {
    ::close(fd);
    ::shm_unlink(name.c_str());
    fail("shared memory '{}': cannot reserve {} bytes: {}", name, bytes, std::strerror(err));
  }
  return shared_region(name, map(fd, bytes, name), bytes, true);
}

shared_region shared_region::open(const std::string& name, size_t bytes) {
  const int fd = ::shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) fail("shared memory '{}': cannot open it: {}", name, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || size_t(st.st_size) < bytes) {
    ::close(fd);
    fail("shared memory '{}' is smaller than the {} bytes expected", name, bytes);
  }
  return shared_region(name, map(fd, bytes, name), bytes, false);
}

shared_region::shared_region(shared_region&& other) noexcept
    : name_(std::move(other.name_)),
      data_(std::exchange(other.data_, nullptr)),
      size_(other.size_),
      owner_(std::exchange(other.owner_, false)) {}

shared_region& shared_region::operator=(shared_region&& other) noexcept {
  if (this != &other) {
    this->~shared_region();
    name_ = std::move(other.name_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = other.size_;
    owner_ = std::exchange(other.owner_, false);
  }
  return *this;
}

shared_region::~shared_region() {
  unlink();
  if (data_) ::munmap(data_, size_);
  data_ = nullptr;
}

void shared_region::unlink() {
  if (owner_) ::shm_unlink(name_.c_str());
  owner_ = false;
}

}  // namespace merak
