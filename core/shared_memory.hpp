#pragma once
// A region of memory shared by the processes of one host (POSIX shared
// memory), owned by an RAII handle: the mapping goes with it.
//
// One process creates the region under a name (O_EXCL: a name in use is an
// error), the others open it by that name; once all have it mapped, the
// creator unlinks the name, so nothing outlives the processes. The region
// starts zeroed, its memory taken and mapped in full when it is made (a
// file system without room for it refuses it then).
//
// A process killed between creating a name and unlinking it cannot unlink
// it, so the names merak creates carry their creator (process_scoped_name):
// sweep_shared_memory() removes those whose creator has ended, and the
// launchers run it when they start and when their ranks have ended.

#include <cstddef>
#include <string>
#include <string_view>

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

// "/merak-KIND-pPID-tSTART-nNS-TAIL": a shared-memory name (or, without
// the slash, a /dev/shm entry) owned by this process, identified by its
// pid, its start time (clock ticks after boot, so a reused pid is told
// apart) and its PID namespace. KIND is lower-case letters; TAIL makes the
// name unique among the process's own.
std::string process_scoped_name(std::string_view kind, std::string_view tail);

// Removes the /dev/shm entries of this user named by process_scoped_name
// whose creator, in this PID namespace, has ended (or is a zombie): files,
// and directories with the files in them. Entries of live processes, of
// other users, of other PID namespaces and every other name are left
// alone. Returns how many entries it removed; never throws.
int sweep_shared_memory();

// A directory in /dev/shm named by process_scoped_name("job", ...) for the
// shared-memory files of one job's processes on this host (UCX's, through
// UCX_POSIX_DIR), removed with the files in it by the destructor. path()
// is empty where /dev/shm takes no directory.
class shared_directory {
 public:
  shared_directory();
  shared_directory(const shared_directory&) = delete;
  shared_directory& operator=(const shared_directory&) = delete;
  ~shared_directory();
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace merak
