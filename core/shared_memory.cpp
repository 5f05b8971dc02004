#include "core/shared_memory.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
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

}  // namespace

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
