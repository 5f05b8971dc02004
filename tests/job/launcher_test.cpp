#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <string>
#include <thread>

#include "job/launcher.hpp"
#include "job/openmp_spin.hpp"
#include "core/error.hpp"

using namespace merak::job;
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

TEST_CASE("processes sharing a host get OpenMP's short spin unless the user chose one",
          "[launcher]") {
  std::map<std::string, std::string> env;
  const auto get = [&env](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  };
  CHECK(processes_on_host(get) == 1);
  CHECK_FALSE(wants_short_openmp_spin(get, 1));
  env["OMPI_COMM_WORLD_LOCAL_SIZE"] = "4";
  CHECK(processes_on_host(get) == 4);
  env["LOCAL_WORLD_SIZE"] = "2";  // the launcher's own variable first
  CHECK(processes_on_host(get) == 2);
  CHECK(wants_short_openmp_spin(get, 2));
  env["LOCAL_WORLD_SIZE"] = "two";
  CHECK(processes_on_host(get) == 4);
  env["OMP_WAIT_POLICY"] = "active";
  CHECK_FALSE(wants_short_openmp_spin(get, 4));
  env.erase("OMP_WAIT_POLICY");
  env["GOMP_SPINCOUNT"] = "77";
  CHECK_FALSE(wants_short_openmp_spin(get, 4));
  env.erase("GOMP_SPINCOUNT");
  env.erase("OMPI_COMM_WORLD_LOCAL_SIZE");

  // `merak node` processes started one by one: each states 1, but rank 0
  // on a loopback address means the whole job is on this host.
  env["LOCAL_WORLD_SIZE"] = "1";
  env["WORLD_SIZE"] = "3";
  env["MASTER_ADDR"] = "10.1.2.3";
  CHECK(processes_on_host(get) == 1);
  for (const char* addr : {"127.0.0.1", "127.0.1.1", "localhost", "::1"}) {
    env["MASTER_ADDR"] = addr;
    CHECK(processes_on_host(get) == 3);
  }
  env["LOCAL_WORLD_SIZE"] = "4";  // never fewer than the launcher states
  CHECK(processes_on_host(get) == 4);
  env.erase("MASTER_ADDR");
  env.erase("WORLD_SIZE");

  // What the children of a local launch see.
  char dir[] = "/tmp/merak-launcher-XXXXXX";
  REQUIRE(::mkdtemp(dir) != nullptr);
  const auto spin_seen = [&](int procs, std::map<std::string, std::string> extra) {
    launch_options o;
    o.procs = procs;
    o.master_port = 1;
    o.token = "tok";
    o.env = std::move(extra);
    // Empty counts as unset, whatever this test's own environment holds.
    for (const char* name : {"GOMP_SPINCOUNT", "OMP_WAIT_POLICY"}) o.env.try_emplace(name, "");
    o.argv = {"/bin/sh", "-c", std::string("echo \"${GOMP_SPINCOUNT}\" > ") + dir + "/r$RANK"};
    REQUIRE(launch_local(o).ok());
    std::ifstream in(std::string(dir) + "/r0");
    std::string line;
    std::getline(in, line);
    for (int r = 0; r < procs; ++r)
      std::remove((std::string(dir) + "/r" + std::to_string(r)).c_str());
    return line;
  };
  CHECK(spin_seen(2, {}) == kshared_host_openmp_spin);
  CHECK(spin_seen(1, {}).empty());
  CHECK(spin_seen(2, {{"OMP_WAIT_POLICY", "passive"}}).empty());
  CHECK(spin_seen(2, {{"GOMP_SPINCOUNT", "77"}}) == "77");
  ::rmdir(dir);
}

TEST_CASE("supervise sleeps until a child ends instead of polling", "[launcher]") {
  rusage before{}, after{};
  REQUIRE(::getrusage(RUSAGE_THREAD, &before) == 0);
  auto r = supervise({shell_child("rank 0", "exec sleep 1")}, {});
  REQUIRE(::getrusage(RUSAGE_THREAD, &after) == 0);
  CHECK(r.ok());
  // A supervisor polling every few milliseconds would block hundreds of times.
  CHECK(after.ru_nvcsw - before.ru_nvcsw < 20);
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
