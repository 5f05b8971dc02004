#include <fcntl.h>
#include <unistd.h>
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>

#include "comm/launcher.hpp"
#include "core/error.hpp"

using namespace merak::comm;
using namespace std::chrono_literals;

namespace {

// What /bin/sh makes of `printf %s QUOTED`.
std::string through_shell(const std::string& quoted) {
  std::string cmd = "printf %s " + quoted;
  FILE* p = ::popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  std::string out;
  char buf[256];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  ::pclose(p);
  return out;
}

child_spec shell_child(const std::string& name, const std::string& script) {
  child_spec c;
  c.name = name;
  c.argv = {"sh", "-c", script};  // found on PATH
  c.env = launcher_environment();
  return c;
}

}  // namespace

TEST_CASE("shell_quote survives a POSIX shell unchanged", "[launcher]") {
  for (std::string s : {"plain", "two words", "it's", "'", "$HOME `id` \"q\" \\ ; | & *", ""})
    CHECK(through_shell(shell_quote(s)) == s);
}

TEST_CASE("supervise feeds stdin and names the child that failed", "[launcher]") {
  char dir[] = "/tmp/merak-launcher-XXXXXX";
  REQUIRE(::mkdtemp(dir) != nullptr);
  const std::string out = std::string(dir) + "/fed";
  auto fed = shell_child("host a (rank 0)", "read a; read b; echo \"$a $b\" > " + out);
  fed.stdin_text = "first line\nsecond\n";
  auto fails = shell_child("host b (ranks 1-2)", "sleep 0.2; exit 3");
  auto r = supervise({fed, fails}, {});
  CHECK_FALSE(r.ok());
  CHECK(r.first_failed == 1);
  CHECK(r.message == "host b (ranks 1-2) failed with exit code 3");
  CHECK(r.exit_code[0] == 0);
  std::ifstream in(out);
  std::string line;
  std::getline(in, line);
  CHECK(line == "first line second");
  std::remove(out.c_str());
  ::rmdir(dir);
}

TEST_CASE("supervise kills the children when the watched input closes", "[launcher]") {
  int fds[2];
  REQUIRE(::pipe2(fds, O_CLOEXEC) == 0);  // the children must not hold the write end
  std::thread closer([w = fds[1]] {
    std::this_thread::sleep_for(200ms);
    ::close(w);
  });
  supervise_options o;
  o.watch_fd = fds[0];
  const auto start = std::chrono::steady_clock::now();
  auto r = supervise(
      {shell_child("rank 0", "exec sleep 30"), shell_child("rank 1", "exec sleep 30")}, o);
  closer.join();
  ::close(fds[0]);
  CHECK(std::chrono::steady_clock::now() - start < 10s);
  CHECK_FALSE(r.ok());
  CHECK(r.message.find("went away") != std::string::npos);
  CHECK(r.signal[0] == 9);
  CHECK(r.signal[1] == 9);
}

TEST_CASE("launch_local checks a node's share of the job", "[launcher]") {
  launch_options o;
  o.argv = {"/bin/true"};
  o.procs = 2;
  o.first_rank = 1;
  o.world_size = 2;
  o.master_port = 1;
  CHECK_THROWS_WITH(launch_local(o), "launcher: ranks 1..2 do not fit a job of 2 ranks");
  o.first_rank = 0;
  o.world_size = 3;
  o.master_port = 0;
  CHECK_THROWS_WITH(launch_local(o),
                    "launcher: a job of 3 ranks with 2 here needs the rendezvous port of rank 0");
}

TEST_CASE("a local launch gives each rank its global and local rank", "[launcher]") {
  char dir[] = "/tmp/merak-launcher-XXXXXX";
  REQUIRE(::mkdtemp(dir) != nullptr);
  launch_options o;
  o.procs = 2;
  o.first_rank = 2;
  o.world_size = 4;
  o.master_port = 1;  // nobody connects: the children only print their variables
  o.token = "tok";
  o.argv = {
      "/bin/sh", "-c",
      std::string("echo $RANK $LOCAL_RANK $WORLD_SIZE $LOCAL_WORLD_SIZE $MERAK_JOB_TOKEN > ") +
          dir + "/r$RANK"};
  REQUIRE(launch_local(o).ok());
  for (int rank : {2, 3}) {
    std::ifstream in(std::string(dir) + "/r" + std::to_string(rank));
    std::string line;
    std::getline(in, line);
    CHECK(line == std::to_string(rank) + " " + std::to_string(rank - 2) + " 4 2 tok");
    std::remove((std::string(dir) + "/r" + std::to_string(rank)).c_str());
  }
  ::rmdir(dir);
}

TEST_CASE("supervise ends a group that outlives its timeout, saying so", "[launcher]") {
  supervise_options o;
  o.timeout = 300ms;
  auto r = supervise({shell_child("rank 0", "exit 0"), shell_child("rank 1", "exec sleep 30")}, o);
  CHECK_FALSE(r.ok());
  CHECK(r.first_failed == 1);
  CHECK(r.message == "the job did not finish within 300 ms; its processes were killed");
  CHECK(r.exit_code[0] == 0);
  CHECK(r.signal[1] == 9);
}
