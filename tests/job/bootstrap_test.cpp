#include <catch2/catch.hpp>

#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "core/checksum.hpp"
#include "core/error.hpp"
#include "job/bootstrap.hpp"
#include "job/socket_io.hpp"
#include "test_pki.hpp"
#include "tests/job/bootstrap_ranks.hpp"

using namespace merak::job;
using merak::same_secret;
using merak::job::test::fake_env;
using merak::job::test::join_ranks;
using namespace std::chrono_literals;

namespace {

std::vector<bootstrap_options> job(int P, int port, std::string token,
                                   std::chrono::milliseconds timeout = 5000ms) {
  std::vector<bootstrap_options> v(P);
  for (int r = 0; r < P; ++r) {
    v[r].rank = r;
    v[r].world_size = P;
    v[r].port = port;
    v[r].token = token;
    v[r].timeout = timeout;
  }
  return v;
}

}  // namespace

TEST_CASE("bootstrap values come from flags, then RANK/WORLD_SIZE, then Open MPI, then Slurm",
          "[job][bootstrap]") {
  auto all = fake_env({{"RANK", "1"},
                       {"WORLD_SIZE", "4"},
                       {"MASTER_ADDR", "10.0.0.7"},
                       {"MASTER_PORT", "29500"},
                       {"OMPI_COMM_WORLD_RANK", "2"},
                       {"OMPI_COMM_WORLD_SIZE", "5"},
                       {"SLURM_PROCID", "3"},
                       {"SLURM_NTASKS", "6"},
                       {"MERAK_JOB_TOKEN", "t0k"}});
  auto o = resolve_bootstrap({}, all);
  CHECK(o.rank == 1);
  CHECK(o.world_size == 4);
  CHECK(o.addr == "10.0.0.7");
  CHECK(o.port == 29500);
  CHECK(o.token == "t0k");
  CHECK(o.bind_addr == "10.0.0.7");  // MASTER_ADDR's interface, not every interface

  bootstrap_options given;
  given.rank = 0;
  given.world_size = 2;
  given.port = 1234;
  o = resolve_bootstrap(given, all);
  CHECK(o.rank == 0);
  CHECK(o.world_size == 2);
  CHECK(o.port == 1234);

  o = resolve_bootstrap({}, fake_env({{"OMPI_COMM_WORLD_RANK", "2"},
                                      {"OMPI_COMM_WORLD_SIZE", "5"},
                                      {"SLURM_PROCID", "3"},
                                      {"SLURM_NTASKS", "6"},
                                      {"MASTER_PORT", "4000"}}));
  CHECK(o.rank == 2);
  CHECK(o.world_size == 5);
  CHECK(o.addr == "127.0.0.1");
  CHECK(o.bind_addr == "127.0.0.1");

  o = resolve_bootstrap(
      {}, fake_env({{"SLURM_PROCID", "3"}, {"SLURM_NTASKS", "6"}, {"MASTER_PORT", "4000"}}));
  CHECK(o.rank == 3);
  CHECK(o.world_size == 6);
}

TEST_CASE("under Slurm and Open MPI the rendezvous needs no MASTER_ADDR or MASTER_PORT",
          "[job][bootstrap]") {
  CHECK(first_slurm_host("node[07-09,12],gpu1") == "node07");
  CHECK(first_slurm_host("gpu1,node[07-09]") == "gpu1");
  CHECK(first_slurm_host("rack[2-3]-n[001-004]") == "rack2-n001");
  CHECK(first_slurm_host("c5") == "c5");
  CHECK_THROWS_WITH(first_slurm_host("node[x-3]"), Catch::Contains("not a Slurm host list"));
  CHECK_THROWS_WITH(first_slurm_host("node[1-3"), Catch::Contains("not a Slurm host list"));
  CHECK_THROWS_WITH(first_slurm_host(""), Catch::Contains("not a Slurm host list"));
  // srun: rank 0 on the first node; every rank derives the same port.
  auto o = resolve_bootstrap({}, fake_env({{"SLURM_PROCID", "3"},
                                           {"SLURM_NTASKS", "8"},
                                           {"SLURM_JOB_ID", "4711"},
                                           {"SLURM_STEP_ID", "0"},
                                           {"SLURM_JOB_NODELIST", "cn[03-04]"},
                                           {"MERAK_JOB_TOKEN", "t"}}));
  CHECK(o.rank == 3);
  CHECK(o.world_size == 8);
  CHECK(o.addr == "cn03");
  CHECK(o.port == rendezvous_port_of_job("4711", "0"));
  CHECK(o.port >= 20000);
  CHECK(o.port < 40000);
  CHECK(rendezvous_port_of_job("4711", "1") != o.port);  // the next step of the job
  // MASTER_* still win.
  o = resolve_bootstrap({}, fake_env({{"SLURM_PROCID", "0"},
                                      {"SLURM_NTASKS", "2"},
                                      {"SLURM_JOB_ID", "4711"},
                                      {"SLURM_JOB_NODELIST", "cn[03-04]"},
                                      {"MASTER_ADDR", "10.1.2.3"},
                                      {"MASTER_PORT", "29501"},
                                      {"MERAK_JOB_TOKEN", "t"}}));
  CHECK(o.addr == "10.1.2.3");
  CHECK(o.port == 29501);
  // mpirun on one host: loopback and a port from the job id.
  o = resolve_bootstrap({}, fake_env({{"OMPI_COMM_WORLD_RANK", "1"},
                                      {"OMPI_COMM_WORLD_SIZE", "2"},
                                      {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                                      {"OMPI_MCA_ess_base_jobid", "1303445505"}}));
  CHECK(o.addr == "127.0.0.1");
  CHECK(o.port == rendezvous_port_of_job("1303445505", "0"));
  // mpirun over hosts: rank 0's host must be named.
  CHECK_THROWS_WITH(resolve_bootstrap({}, fake_env({{"OMPI_COMM_WORLD_RANK", "1"},
                                                    {"OMPI_COMM_WORLD_SIZE", "4"},
                                                    {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                                                    {"OMPI_MCA_ess_base_jobid", "5"}})),
                    Catch::Contains("mpirun -x MASTER_ADDR=HOST"));
}

TEST_CASE("an Open MPI job over several hosts rendezvouses through PMIx unless told where",
          "[job][bootstrap]") {
  std::map<std::string, std::string> two_hosts{{"OMPI_COMM_WORLD_RANK", "1"},
                                               {"OMPI_COMM_WORLD_SIZE", "4"},
                                               {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                                               {"OMPI_MCA_ess_base_jobid", "5"},
                                               {"PMIX_NAMESPACE", "prterun-a-5@1"}};
  CHECK(rendezvous_through_pmix({}, fake_env(two_hosts)));
  // Told where: MASTER_ADDR or an explicit address.
  auto told = two_hosts;
  told["MASTER_ADDR"] = "h1";
  CHECK_FALSE(rendezvous_through_pmix({}, fake_env(told)));
  bootstrap_options given;
  given.addr = "h1";
  CHECK_FALSE(rendezvous_through_pmix(given, fake_env(two_hosts)));
  // One host: loopback does (above). No PMIx server: nothing to ask.
  auto one_host = two_hosts;
  one_host["OMPI_COMM_WORLD_LOCAL_SIZE"] = "4";
  CHECK_FALSE(rendezvous_through_pmix({}, fake_env(one_host)));
  auto no_server = two_hosts;
  no_server.erase("PMIX_NAMESPACE");
  CHECK_FALSE(rendezvous_through_pmix({}, fake_env(no_server)));
  // Not Open MPI (a PMIx server of another launcher): its own variables.
  auto other = two_hosts;
  other.erase("OMPI_MCA_ess_base_jobid");
  CHECK_FALSE(rendezvous_through_pmix({}, fake_env(other)));
  auto bad = two_hosts;
  bad["OMPI_COMM_WORLD_LOCAL_SIZE"] = "two";
  CHECK_THROWS_WITH(rendezvous_through_pmix({}, fake_env(bad)),
                    Catch::Contains("OMPI_COMM_WORLD_LOCAL_SIZE"));
}

TEST_CASE("bad bootstrap values are refused naming the variable", "[job][bootstrap]") {
  CHECK_THROWS_WITH(resolve_bootstrap({}, fake_env({{"RANK", "x1"}, {"WORLD_SIZE", "2"}})),
                    Catch::Contains("RANK='x1'"));
  CHECK_THROWS_WITH(
      resolve_bootstrap({},
                        fake_env({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "70000"}})),
      Catch::Contains("MASTER_PORT"));
  CHECK_THROWS_WITH(resolve_bootstrap({}, fake_env({{"RANK", "4"}, {"WORLD_SIZE", "4"}})),
                    Catch::Contains("RANK") && Catch::Contains("WORLD_SIZE"));
  CHECK_THROWS_WITH(resolve_bootstrap({}, fake_env({{"RANK", "0"}, {"WORLD_SIZE", "2"}})),
                    Catch::Contains("MASTER_PORT"));
  CHECK_THROWS_WITH(resolve_bootstrap({}, fake_env({{"WORLD_SIZE", "2"}})),
                    Catch::Contains("no rank"));
  // No token: only on loopback.
  CHECK_THROWS_WITH(resolve_bootstrap({}, fake_env({{"RANK", "1"},
                                                    {"WORLD_SIZE", "2"},
                                                    {"MASTER_ADDR", "10.0.0.7"},
                                                    {"MASTER_PORT", "4000"}})),
                    Catch::Contains("needs a job token"));
  CHECK_THROWS_WITH(resolve_bootstrap({}, fake_env({{"RANK", "0"},
                                                    {"WORLD_SIZE", "2"},
                                                    {"MASTER_PORT", "4000"},
                                                    {"MERAK_BIND_ADDR", "0.0.0.0"}})),
                    Catch::Contains("needs a job token"));
  CHECK(
      resolve_bootstrap({}, fake_env({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "4000"}}))
          .token.empty());
}

TEST_CASE("job tokens are compared in full", "[job][bootstrap]") {
  CHECK(same_secret("abc", 3, "abc", 3));
  CHECK_FALSE(same_secret("abc", 3, "abd", 3));
  CHECK_FALSE(same_secret("abc", 3, "abcd", 4));
  CHECK_FALSE(same_secret("", 0, "a", 1));
  CHECK(same_secret("", 0, "", 0));
}

TEST_CASE("ranks join over TCP and all-gather blobs in rank order", "[job][bootstrap]") {
  for (int P : {1, 2, 5}) {
    const int port = pick_free_port();
    std::vector<std::vector<std::string>> got(P);
    auto errors = join_ranks(job(P, port, "secret"), [&](bootstrap& b) {
      auto all = b.allgather(std::string(b.rank() * 1000, char('a' + b.rank())));
      b.barrier();
      auto again = b.allgather(fmt::format("r{}", b.rank()));
      got[b.rank()] = all;
      if (again.size() != size_t(P) || again[P - 1] != fmt::format("r{}", P - 1))
        throw std::runtime_error("second all-gather differs");
    });
    for (int r = 0; r < P; ++r) {
      REQUIRE(errors[r] == "");
      for (int k = 0; k < P; ++k) REQUIRE(got[r][k] == std::string(k * 1000, char('a' + k)));
    }
  }
}

TEST_CASE("a peer with the wrong job token is refused", "[job][bootstrap]") {
  const int port = pick_free_port();
  auto opts = job(2, port, "right", 1500ms);
  opts[1].token = "wrong";
  auto errors = join_ranks(opts, [](bootstrap&) {});
  CHECK_THAT(errors[1], Catch::Contains("refused") && Catch::Contains("wrong job token"));
  // Rank 0 keeps waiting for a rightful rank 1, then names it.
  CHECK_THAT(errors[0], Catch::Contains("ranks 1 did not join"));
}

TEST_CASE("a rank whose rank 0 never listens fails within the timeout", "[job][bootstrap]") {
  const int port = pick_free_port();
  auto opts = job(2, port, "", 300ms);
  auto t0 = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH(connect_bootstrap(resolve_bootstrap(opts[1], fake_env({}))),
                    Catch::Contains("rank 0 at 127.0.0.1") && Catch::Contains("not reachable"));
  CHECK(std::chrono::steady_clock::now() - t0 < 3s);
}

TEST_CASE("an all-gather names the rank that went away", "[job][bootstrap]") {
  const int port = pick_free_port();
  auto errors = join_ranks(job(3, port, "t", 2000ms), [](bootstrap& b) {
    if (b.rank() == 2) return;  // leaves: its connection closes
    b.allgather("x");
  });
  CHECK_THAT(errors[0], Catch::Contains("rank 2") && Catch::Contains("closed"));
  CHECK_THAT(errors[1], Catch::Contains("rank 0"));
}

TEST_CASE("the bootstrap learns that a rank's process went away and tells every rank",
          "[job][bootstrap]") {
  const int port = pick_free_port();
  std::atomic<int> left{0};
  std::vector<int> seen(3, -1);
  auto errors = join_ranks(job(3, port, "t", 3000ms), [&](bootstrap& b) {
    if (b.dead_peer() != -1) throw std::runtime_error("a dead peer before anyone left");
    b.barrier();
    if (b.rank() == 2) {
      left = 1;
      return;  // its connection closes as if the process had exited
    }
    const auto until = std::chrono::steady_clock::now() + 2s;
    while (b.dead_peer() < 0 && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(5ms);
    seen[b.rank()] = b.dead_peer();
  });
  for (int r = 0; r < 3; ++r) CHECK(errors[r] == "");
  CHECK(seen[0] == 2);
  CHECK(seen[1] == 2);
}

TEST_CASE("under TLS ranks all-gather and learn of a rank that went away", "[job][bootstrap]") {
  merak::test::test_pki pki({"r0", "r1", "r2"});
  const int port = pick_free_port();
  auto opts = job(3, port, "t", 3000ms);
  for (int r = 0; r < 3; ++r) opts[r].tls = pki.files(fmt::format("r{}", r));
  std::vector<int> seen(3, -1);
  std::vector<std::vector<std::string>> got(3);
  auto errors = join_ranks(opts, [&](bootstrap& b) {
    if (!b.credentials().tls) throw std::runtime_error("no TLS context");
    got[b.rank()] = b.allgather(std::string(70000 * (b.rank() + 1), char('a' + b.rank())));
    b.barrier();
    if (b.rank() == 2) return;
    const auto until = std::chrono::steady_clock::now() + 2s;
    while (b.dead_peer() < 0 && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(5ms);
    seen[b.rank()] = b.dead_peer();
  });
  for (int r = 0; r < 3; ++r) {
    REQUIRE(errors[r] == "");
    for (int k = 0; k < 3; ++k) CHECK(got[r][k] == std::string(70000 * (k + 1), char('a' + k)));
  }
  CHECK(seen[0] == 2);
  CHECK(seen[1] == 2);
}

TEST_CASE("under TLS a rank with a certificate of another CA cannot join", "[job][bootstrap]") {
  merak::test::test_pki pki({"r0", "r1"});
  merak::test::test_pki rogue({"r1"});
  const int port = pick_free_port();
  auto opts = job(2, port, "t", 1500ms);
  opts[0].tls = pki.files("r0");
  opts[1].tls = rogue.files("r1");
  auto errors = join_ranks(opts, [](bootstrap&) {});
  CHECK_THAT(errors[1], Catch::Contains("bootstrap rank 1: TLS handshake with rank 0") &&
                            Catch::Contains("certificate verify failed"));
  CHECK_THAT(errors[0], Catch::Contains("ranks 1 did not join") &&
                            Catch::Contains("connections refused or silent"));
  // Partial TLS settings are refused before anything connects.
  auto o = opts[1];
  o.tls = {};
  CHECK_THROWS_WITH(
      resolve_bootstrap(o, fake_env({{"MERAK_TLS_CERT", "/x"}, {"MERAK_TLS_KEY", "/y"}})),
      Catch::Contains("MERAK_TLS_CA") && Catch::Contains("the CA is missing"));
  o.tls = {"/x", "", ""};
  CHECK_THROWS_WITH(resolve_bootstrap(o, fake_env({})),
                    Catch::Contains("--tls-cert, --tls-key and --tls-ca"));
}

TEST_CASE("silent and hostile connections do not delay a job's start", "[job][bootstrap]") {
  const int port = pick_free_port();
  std::vector<unique_fd> silent;
  std::atomic<bool> stop{false};
  // Rank 0 first; then 20 connections that say nothing, one that announces
  // a 4 GiB frame and one that sends garbage, all before the real ranks.
  auto opts = job(3, port, "t", 8000ms);
  std::vector<std::string> errors;
  const auto t0 = std::chrono::steady_clock::now();
  std::thread jobs([&] {
    std::this_thread::sleep_for(300ms);
    errors = join_ranks({opts[1], opts[2]}, [](bootstrap& b) { b.barrier(); });
  });
  std::thread hostile([&] {
    const auto a = resolve_ipv4("127.0.0.1", port, "test");
    const auto until = std::chrono::steady_clock::now() + 5s;
    for (int i = 0; i < 22; ++i) silent.push_back(connect_tcp(a, until, "test", "rank 0"));
    std::string big;
    put_u64(big, uint64_t{1} << 32);
    ::send(silent[20].get(), big.data(), big.size(), MSG_NOSIGNAL);
    ::send(silent[21].get(), "\xff\xff\xff\xff\xff\xff\xff\xffjunk", 12, MSG_NOSIGNAL);
  });
  std::string err0;
  try {
    auto b = connect_bootstrap(resolve_bootstrap(opts[0], fake_env({})));
    b->barrier();
  } catch (const std::exception& e) {
    err0 = e.what();
  }
  const auto took = std::chrono::steady_clock::now() - t0;
  jobs.join();
  hostile.join();
  CHECK(err0 == "");
  REQUIRE(errors.size() == 2);
  CHECK(errors[0] == "");
  CHECK(errors[1] == "");
  // One at a time, at 5 s per silent peer, this would take a minute or more.
  CHECK(took < 3s);
}

TEST_CASE("rank 0 listens on MASTER_ADDR's interface and says so when that is not this host",
          "[job][bootstrap]") {
  auto o = job(2, pick_free_port(), "t", 1000ms)[0];
  o.addr = "192.0.2.1";  // TEST-NET-1: never an address of this host
  o = resolve_bootstrap(o, fake_env({}));
  CHECK(o.bind_addr == "192.0.2.1");
  CHECK_THROWS_WITH(connect_bootstrap(o), Catch::Contains("192.0.2.1") &&
                                              Catch::Contains("not an address of this host") &&
                                              Catch::Contains("MASTER_ADDR"));
}
