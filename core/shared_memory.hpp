#pragma once
// A region of memory shared by the processes of one host (POSIX shared
// memory), owned by an RAII handle: the mapping goes with it.
//
// One process creates the region under a name (O_EXCL: a name in use is an
// error), the others open it by that name; once all have it mapped, the
// creator unlinks the name, so nothing outlives the processes. The region
// starts zeroed, its memory taken and mapped in full when it is made (a
// file system without room for it refuses it then).

#include <cstddef>
#include <string>

namespace merak {

class shared_region {
 public:
  shared_region() = default;
  // `name` is "/something". Throws merak::error naming the region.
  static shared_region create(const std::string& name, size_t bytes);
  static shared_region open(const std::string& name, size_t bytes);
  shared_region(shared_region&& other) noexcept;
  shared_region& operator=(shared_region&& other) noexcept;
  shared_region(const shared_region&) = delete;
  shared_region& operator=(const shared_region&) = delete;
  ~shared_region();

  void* data() const { return data_; }
  size_t size() const { return size_; }
  // Removes the name (the mappings stay). Safe to call more than once.
  void unlink();

 private:
  shared_region(std::string name, void* data, size_t size, bool owner)
      : name_(std::move(name)), data_(data), size_(size), owner_(owner) {}
  std::string name_;
  void* data_ = nullptr;
  size_t size_ = 0;
  bool owner_ = false;  // created it: unlinks it
};

}  // namespace merak
