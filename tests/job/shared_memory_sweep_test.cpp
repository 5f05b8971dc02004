#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include "core/shared_memory.hpp"

using namespace merak;

namespace {

bool in_shm(const std::string& name) {
  struct stat st {};
  return ::stat(("/dev/shm" + name).c_str(), &st) == 0;
}

// What a child process makes and leaves behind as it is killed (no
// destructor runs): `make` returns the /dev/shm name it made.
template <typename Make>
std::string left_by_dead_child(Make make) {
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::close(fds[0]);
    const std::string name = make();
    (void)!::write(fds[1], name.data(), name.size());
    ::_exit(0);
  }
  ::close(fds[1]);
  std::string name;
  char buf[256];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) name.append(buf, size_t(n));
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return name;
}

}  // namespace

TEST_CASE("the sweep removes the shared memory of ended processes only", "[launcher]") {
  if (::access("/dev/shm", W_OK) != 0) return;
  const std::string dead_file = left_by_dead_child([] {
    const std::string name = process_scoped_name("ring", "sweep-test");
    auto region = new shared_region(shared_region::create(name, 4096));  // never unlinked
    (void)region;
    return name;
  });
  const std::string dead_dir = left_by_dead_child([] {
    auto dir = new shared_directory();  // never removed
    std::ofstream(dir->path() + "/ucx_shm_posix_1") << "x";
    return dir->path().substr(8);  // without "/dev/shm"
  });
  REQUIRE(in_shm(dead_file));
  REQUIRE(in_shm(dead_dir));
  REQUIRE(in_shm(dead_dir + "/ucx_shm_posix_1"));

  // This process's own, and one that names another PID namespace.
  const std::string live = process_scoped_name("ring", "sweep-test-live");
  shared_region mine = shared_region::create(live, 4096);
  const std::string other_ns = "/merak-ring-p999999999-t1-n1-sweep-test";
  const int fd = ::shm_open(other_ns.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  REQUIRE(fd >= 0);
  ::close(fd);

  CHECK(sweep_shared_memory() >= 2);
  CHECK_FALSE(in_shm(dead_file));
  CHECK_FALSE(in_shm(dead_dir));
  CHECK(in_shm(live));
  CHECK(in_shm(other_ns));
  ::shm_unlink(other_ns.c_str());
}

TEST_CASE("a job's shared directory goes with the files in it", "[launcher]") {
  std::string path;
  {
    shared_directory dir;
    if (dir.path().empty()) return;  // no /dev/shm here
    path = dir.path();
    CHECK(path.rfind("/dev/shm/merak-job-p" + std::to_string(::getpid()) + "-t", 0) == 0);
    std::ofstream(path + "/ucx_shm_posix_2") << "x";
  }
  struct stat st {};
  CHECK(::stat(path.c_str(), &st) != 0);
}
