// Multi-process tests of the UCX transport, the bootstrap and the launcher:
// real processes on loopback (ctest label multiproc).
//
//   merak_comm_multiproc <scenario> <procs>   launches <procs> workers of itself
//   (worker mode: MERAK_MP_WORKER=<scenario> in the environment)
//
// Scenarios
//   allreduce  ring allreduce_sum/or, allgatherv and broadcast over UCX equal
//              the reference, with equal bits on every rank; exit 0.
//   bad_token  the last rank presents a wrong job token: it must be refused
//              with "wrong job token", rank 0 must name it as not joined, the
//              others must fail naming rank 0. Each worker exits 42 when it
//              saw what it should.
//   peer_dies  rank 1 is killed (SIGKILL) in the middle of a run of
//              all-reduces; every other rank must fail within its timeout
//              with an error naming peer 1 (exit 42), never hang.
//   peer_hangs rank 1 stops taking part (alive, sleeping); every other rank
//              must fail with "timed out" (or, behind a neighbour that timed
//              out and exited, "went away") naming a peer within a few of its
//              2 s timeouts (exit 42; the margin keeps a loaded machine
//              under ctest -j2 from failing it);
//              rank 1 is then killed by the launcher.
//   mixed_tls  rank 1 runs with UCX_TLS=tcp,self, the others with it unset
//              (so they would negotiate shared memory): every rank must fail
//              at once naming a rank whose setting differs, with both
//              settings (exit 42), never read one exchange as another.
// The driver exits 0 when the scenario behaved as described, else 1.

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "job/bootstrap.hpp"
#include "comm/collectives.hpp"
#include "job/launcher.hpp"
#include "comm/ucx_transport.hpp"
#include "core/error.hpp"
#include "rank_values.hpp"

using namespace merak::comm;
using namespace merak::job;
using namespace std::chrono_literals;

namespace {

constexpr int kexpected_failure = 42;

using merak::comm::testing::doubling_bytes;
using merak::comm::testing::fnv;
using merak::comm::testing::value;

void require(bool ok, const std::string& what) {
  if (!ok) merak::fail("check failed: {}", what);
}

int worker_allreduce(bootstrap& b, transport& t) {
  const int P = t.size(), r = t.rank();
  // The ring, then recursive doubling (every size: ring_options::doubling_max_bytes).
  for (size_t doubling : {size_t{0}, ~size_t{0}})
    for (size_t n : {size_t{1}, size_t(P > 1 ? P - 1 : 1), size_t{1000}, size_t{12347},
                     (size_t{1} << 20) + 3}) {
      std::vector<float> x(n);
      for (size_t i = 0; i < n; ++i) x[i] = value(r, i);
      t.reset_bytes_sent();
      allreduce_sum(t, x, 1, ring_options{size_t{1} << 16, 4, doubling});
      for (size_t i = 0; i < n; ++i) {
        double ref = 0, mag = 0;
        for (int k = 0; k < P; ++k) {
          ref += value(k, i);
          mag += std::abs(value(k, i));
        }
        require(std::abs(x[i] - ref) <= P * 6e-8 * mag,
                fmt::format("n {} element {}: {} vs reference {}", n, i, x[i], ref));
      }
      const double expect =
          doubling ? double(doubling_bytes(P, r, n * 4)) : 2.0 * (P - 1) / P * n * 4;
      require(
          std::abs(double(t.bytes_sent()) - expect) <= (doubling ? 0 : 2.0 * (P - 1) * 4),
          fmt::format("bytes sent {} vs {} (doubling {})", t.bytes_sent(), expect, doubling != 0));
      // UCX completes a large (rendezvous) send only when its receiver keeps
      // progressing the worker; a rank whose receives are done must not block
      // in the bootstrap's sockets while a peer still waits for that. A
      // barrier over the transport ends the phase with everyone progressing.
      barrier(t, 5);
      const uint64_t h = fnv(x.data(), n * 4);
      for (auto& o : b.allgather(std::string(reinterpret_cast<const char*>(&h), sizeof h)))
        require(o == std::string(reinterpret_cast<const char*>(&h), sizeof h),
                fmt::format("n {}: ranks hold different bits", n));
    }
  std::vector<uint64_t> bits(77, 0);
  for (size_t i = 0; i < bits.size(); ++i) bits[i] = uint64_t{1} << ((i + r) % 64);
  allreduce_or(t, bits, 2);
  for (size_t i = 0; i < bits.size(); ++i) {
    uint64_t ref = 0;
    for (int k = 0; k < P; ++k) ref |= uint64_t{1} << ((i + k) % 64);
    require(bits[i] == ref, "allreduce_or");
  }
  std::vector<std::byte> mine(r * 1000 + 1, std::byte(r)), all;
  auto sizes = allgatherv(t, mine.data(), mine.size(), all, 3);
  size_t off = 0;
  for (int k = 0; k < P; ++k) {
    require(sizes[k] == size_t(k * 1000 + 1), "allgatherv sizes");
    for (size_t i = 0; i < sizes[k]; ++i) require(all[off++] == std::byte(k), "allgatherv data");
  }
  std::vector<int> buf(300001, 0);
  if (r == P - 1)
    for (size_t i = 0; i < buf.size(); ++i) buf[i] = int(i);
  broadcast(t, buf.data(), buf.size() * sizeof(int), P - 1, 4, 1 << 16);
  for (size_t i = 0; i < buf.size(); i += 997) require(buf[i] == int(i), "broadcast");
  barrier(t, 6);  // as above: the chain's last sends finish before the bootstrap barrier
  return 0;
}

int worker(const std::string& scenario) {
  bootstrap_options bo;
  bo.timeout = scenario == "bad_token" ? 3000ms : 30000ms;
  const auto opts = resolve_bootstrap(bo);
  const int rank = opts.rank;
  try {
    std::shared_ptr<bootstrap> b = connect_bootstrap(opts);
    ucx_options uo;
    if (const char* m = std::getenv("MERAK_UCX_ERROR_MODE"))
      uo.error_mode = parse_ucx_error_mode(m);
    if (const char* m = std::getenv("MERAK_UCX_SPIN_US"))
      uo.spin = std::chrono::microseconds(std::atol(m));
    if (const char* m = std::getenv("MERAK_UCX_CMA")) uo.cma = std::atoi(m) != 0;
    uo.timeout = scenario == "peer_dies" ? 5000ms : scenario == "peer_hangs" ? 2000ms : 30000ms;
    auto t = make_ucx_transport(b, uo);
    if (scenario == "mixed_tls") {
      std::cerr << "rank " << rank << ": the transport started with mixed UCX_TLS settings\n";
      return 1;
    }
    if (scenario == "allreduce") {
      // Every rank is on this host: with UCX_TLS unset the transport asks for
      // shared memory, with cma's rendezvous from 1 MiB when it may (the
      // doubling's 4 MiB exchanges below then go by cma).
      const char* tls = std::getenv("UCX_TLS");
      if ((!tls || !*tls) && uo.error_mode == ucx_error_mode::none) {
        const char* thresh = std::getenv("UCX_RNDV_THRESH");  // the user's, kept
        const std::string want = !(uo.cma && cma_usable()) ? "posix,self"
                                 : thresh                  ? "posix,cma,self"
                                                           : "posix,cma,self;rndv>=1048576";
        require(ucx_setting_of(*t) == want,
                fmt::format("UCX setting {}, expected {}", ucx_setting_of(*t), want));
      }
      worker_allreduce(*b, *t);
      b->barrier();
      return 0;
    }
    if (scenario == "speed") {
      // Not a test: median time of an allreduce_sum (tuning aid; MERAK_MP_MIB,
      // MERAK_MP_CHUNK_KIB, MERAK_MP_WINDOW).
      auto env_int = [](const char* v, long d) {
        const char* s = std::getenv(v);
        return s ? std::atol(s) : d;
      };
      const size_t mib = size_t(env_int("MERAK_MP_MIB", 16));
      ring_options ro;
      ro.chunk_bytes = size_t(env_int("MERAK_MP_CHUNK_KIB", 1024)) << 10;
      ro.window = int(env_int("MERAK_MP_WINDOW", 4));
      std::vector<float> x(mib << 18, 1.0f);
      std::vector<double> ms;
      // MERAK_MP_BARRIER=ucx: a barrier over the transport before each
      // all-reduce (as bench_codec_over does) instead of the bootstrap's.
      const bool ucx_barrier =
          std::getenv("MERAK_MP_BARRIER") && std::string(std::getenv("MERAK_MP_BARRIER")) == "ucx";
      for (int it = 0; it < 12; ++it) {
        if (ucx_barrier)
          barrier(*t, 9);
        else
          b->barrier();
        auto t0 = std::chrono::steady_clock::now();
        allreduce_sum(*t, x, 8, ro);
        ms.push_back(
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                .count());
      }
      std::sort(ms.begin(), ms.end());
      if (rank == 0)
        std::cout << mib << " MiB allreduce_sum median " << ms[ms.size() / 2] << " ms min " << ms[0]
                  << " ms\n";
      b->barrier();
      return 0;
    }
    if (scenario == "peer_hangs") {
      std::vector<float> x(100000, 1.0f);
      for (int it = 0; it < 1000000; ++it) {
        if (it == 3 && rank == 1) std::this_thread::sleep_for(60s);
        const auto t0 = std::chrono::steady_clock::now();
        try {
          allreduce_sum(*t, x, 7);
        } catch (const std::exception& e) {
          const double s =
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
          std::cerr << "[expected? rank " << rank << " after " << s << " s] " << e.what() << "\n";
          const std::string msg = e.what();
          // Each rank waits at most a few timeouts (its own, then what its
          // left neighbour's failure costs it). A rank whose left neighbour
          // timed out first and exited may see that neighbour go away
          // before its own timeout: also a failure naming the peer.
          const bool named = msg.find("timed out") != std::string::npos ||
                             msg.find("went away") != std::string::npos;
          return named && msg.find("peer ") != std::string::npos && s < 10.0 ? kexpected_failure
                                                                             : 1;
        }
      }
      return 1;
    }
    if (scenario == "peer_dies") {
      std::vector<float> x(100000, 1.0f);
      for (int it = 0; it < 1000000; ++it) {
        if (it == 3 && rank == 1) ::raise(SIGKILL);
        allreduce_sum(*t, x, 7);
      }
      std::cerr << "rank " << rank << ": all-reduces went on without rank 1\n";
      return 1;
    }
    std::cerr << "rank " << rank << ": scenario " << scenario << " expected to fail earlier\n";
    return 1;
  } catch (const std::exception& e) {
    const std::string msg = e.what();
    std::cerr << "[expected? rank " << rank << "] " << msg << "\n";
    bool expected = false;
    if (scenario == "bad_token") {
      if (rank == opts.world_size - 1)
        expected = msg.find("wrong job token") != std::string::npos;
      else if (rank == 0)
        expected = msg.find(fmt::format("ranks {} did not join", opts.world_size - 1)) !=
                   std::string::npos;
      else
        expected = msg.find("rank 0") != std::string::npos;
    } else if (scenario == "peer_dies") {
      expected = msg.find("peer 1 ") != std::string::npos && rank != 1;
    } else if (scenario == "mixed_tls") {
      const std::string other = rank == 1 ? "rank 0 runs with UCX_TLS=(unset), error mode none"
                                          : "rank 1 runs with UCX_TLS=tcp,self, error mode none";
      expected =
          msg.find(other) != std::string::npos && msg.find("same UCX_TLS") != std::string::npos;
    }
    return expected ? kexpected_failure : 1;
  }
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (const char* s = std::getenv("MERAK_MP_WORKER")) return worker(s);
    if (argc != 3) {
      std::cerr << "usage: " << argv[0]
                << " allreduce|bad_token|peer_dies|peer_hangs|mixed_tls <procs>\n";
      return 2;
    }
    const std::string scenario = argv[1];
    launch_options lo;
    lo.procs = std::atoi(argv[2]);
    lo.argv = {self_executable()};
    lo.env["MERAK_MP_WORKER"] = scenario;
    lo.grace = 20000ms;  // let the survivors report, within their timeouts
    if (scenario == "peer_hangs") lo.grace = 14000ms;  // then end the sleeper
    lo.timeout = 100000ms;
    if (scenario == "bad_token")
      lo.rank_env = [&](int r, std::map<std::string, std::string>& env) {
        if (r == lo.procs - 1) env["MERAK_JOB_TOKEN"] = "not-the-token";
      };
    if (scenario == "mixed_tls")
      lo.rank_env = [](int r, std::map<std::string, std::string>& env) {
        if (r == 1) env["UCX_TLS"] = "tcp,self";
      };
    const auto t0 = std::chrono::steady_clock::now();
    auto res = launch_local(lo);
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::cout << scenario << " with " << lo.procs
              << " processes: " << (res.ok() ? "all ranks succeeded" : res.message) << " (" << secs
              << " s)\n";
    bool pass = false;
    if (scenario == "allreduce" || scenario == "speed") {
      pass = res.ok();
    } else if (scenario == "bad_token" || scenario == "mixed_tls") {
      pass = true;
      for (int r = 0; r < lo.procs; ++r) pass = pass && res.exit_code[r] == kexpected_failure;
    } else if (scenario == "peer_hangs") {
      pass = res.signal[1] == SIGKILL;
      for (int r = 0; r < lo.procs; ++r)
        if (r != 1) pass = pass && res.exit_code[r] == kexpected_failure;
    } else if (scenario == "peer_dies") {
      // Rank 1 dies first; the launcher may reap a survivor's exit in the
      // same pass, so which rank it names first is not checked.
      // Found through the bootstrap's watch, well before the 5 s timeout.
      pass = res.signal[1] == SIGKILL && secs < 4.0;
      for (int r = 0; r < lo.procs; ++r)
        if (r != 1) pass = pass && res.exit_code[r] == kexpected_failure;
    }
    for (int r = 0; r < lo.procs; ++r)
      std::cout << "  rank " << r << ": exit " << res.exit_code[r] << " signal " << res.signal[r]
                << "\n";
    std::cout << (pass ? "PASS" : "FAIL") << "\n";
    return pass ? 0 : 1;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}
