// NCCL's point-to-point semantics over in-process endpoints: the
// collectives give the same bits as over the plain endpoints, a receive
// that takes a message sent with another tag is named, and a send that
// waits for a receive never posted deadlocks as it would on NCCL.
#include <catch2/catch.hpp>

#include <cstring>
#include <vector>

#include "comm/collectives.hpp"
#include "comm/nccl_semantics.hpp"
#include "comm_test_util.hpp"

using namespace merak::comm;
using merak::comm::testing::run_ranks;
using namespace std::chrono_literals;

namespace {

float value(int r, size_t i) {
  return float(int((i * 2654435761u + uint64_t(r) * 40503u) % 20001) - 10000) * 1e-3f * float(r + 1);
}

// Every collective of collectives.hpp on rank t; the results, as bytes.
std::vector<std::byte> run_all(transport& t) {
  const int r = t.rank(), P = t.size();
  std::vector<std::byte> out;
  auto keep = [&](const void* p, size_t n) {
    auto* b = static_cast<const std::byte*>(p);
    out.insert(out.end(), b, b + n);
  };
  for (size_t n : {size_t(1), size_t(1000), size_t(300001)}) {  // doubling and ring
    std::vector<float> x(n);
    for (size_t i = 0; i < n; ++i) x[i] = value(r, i);
    allreduce_sum(t, std::span<float>(x), 3);
    keep(x.data(), x.size() * 4);
    std::vector<merak::bf16> h(n);
    for (size_t i = 0; i < n; ++i) h[i] = merak::to_bf16(value(r, i));
    allreduce_sum(t, std::span<merak::bf16>(h), 4);
    keep(h.data(), h.size() * 2);
    for (size_t i = 0; i < n; ++i) x[i] = value(r, i);
    reduce_scatter_sum(t, std::span<float>(x), 5);
    auto [b, e] = shard_range(n, P, r);
    keep(x.data() + b, (e - b) * 4);
    allgather_shards(t, x.data(), n, sizeof(float), 6);
    keep(x.data(), x.size() * 4);
    const std::vector<std::pair<size_t, size_t>> exact = {{0, n / 3}};
    allgather_shards_bf16(t, x, exact, 7);
    keep(x.data(), x.size() * 4);
  }
  std::vector<std::byte> all;
  const std::vector<std::byte> mine(size_t(r) * 7 + 1, std::byte(r));
  allgatherv(t, mine.data(), mine.size(), all, 8);
  keep(all.data(), all.size());
  std::vector<int> b(5000, r == P - 1 ? 17 : 0);
  broadcast(t, b.data(), b.size() * sizeof(int), P - 1, 9);
  keep(b.data(), b.size() * sizeof(int));
  barrier(t, 10);
  return out;
}

}  // namespace

TEST_CASE("collectives over NCCL's matching and rendezvous give the plain endpoints' bits",
          "[comm][nccl_semantics]") {
  for (int P = 1; P <= 5; ++P) {
    std::vector<std::vector<std::byte>> plain(P), ordered(P);
    auto e1 = run_ranks(P, [&](transport& t) { plain[t.rank()] = run_all(t); });
    auto e2 = run_ranks(
        P, [&](transport& t) { ordered[t.rank()] = run_all(t); }, 20000ms, with_nccl_semantics);
    for (int r = 0; r < P; ++r) {
      INFO("P " << P << " rank " << r);
      REQUIRE(e1[r] == "");
      REQUIRE(e2[r] == "");
      REQUIRE(ordered[r] == plain[r]);
    }
  }
}

TEST_CASE("a receive that takes a message sent with another tag is named",
          "[comm][nccl_semantics]") {
  // Rank 0 sends tag 1, then tag 2; rank 1 posts its receive for tag 2
  // first. The in-process transport matches by tag; NCCL by order.
  auto pattern = [](transport& t) {
    std::vector<float> a(16, 1.0f), b(16, 2.0f), x(16), y(16);
    if (t.rank() == 0) {
      auto s1 = t.isend(1, 1, a.data(), 64);
      auto s2 = t.isend(1, 2, b.data(), 64);
      s1.wait();
      s2.wait();
    } else {
      auto r2 = t.irecv(0, 2, y.data(), 64);
      auto r1 = t.irecv(0, 1, x.data(), 64);
      r2.wait();
      r1.wait();
      if (x[0] != 1.0f || y[0] != 2.0f) throw std::runtime_error("wrong payloads");
    }
  };
  auto plain = run_ranks(2, pattern);
  CHECK(plain[0] == "");
  CHECK(plain[1] == "");
  auto errors = run_ranks(2, pattern, 2000ms, with_nccl_semantics);
  CHECK(errors[1].find("rank 1: receive 1 from rank 0 (tag 2) takes the message rank 0 sent "
                       "with tag 1") != std::string::npos);
}

TEST_CASE("a send waited on before the receive it needs is posted deadlocks, and is named",
          "[comm][nccl_semantics]") {
  // Both ranks send, wait, then receive: fine where sends complete at once,
  // a deadlock on NCCL.
  auto pattern = [](transport& t) {
    std::vector<float> a(8, float(t.rank())), x(8);
    const int peer = 1 - t.rank();
    t.isend(peer, 5, a.data(), 32).wait();
    t.irecv(peer, 5, x.data(), 32).wait();
  };
  auto plain = run_ranks(2, pattern);
  CHECK(plain[0] == "");
  CHECK(plain[1] == "");
  auto errors = run_ranks(2, pattern, 300ms, with_nccl_semantics);
  for (int r = 0; r < 2; ++r)
    CHECK(errors[r].find("is still waiting for rank " + std::to_string(1 - r) +
                         " to post its receive") != std::string::npos);
  // Posting the receive first (or in one go, as NCCL's groups do) is fine.
  auto fixed = run_ranks(
      2,
      [](transport& t) {
        std::vector<float> a(8, float(t.rank())), x(8);
        const int peer = 1 - t.rank();
        auto rc = t.irecv(peer, 5, x.data(), 32);
        auto sc = t.isend(peer, 5, a.data(), 32);
        sc.wait();
        rc.wait();
        if (x[0] != float(peer)) throw std::runtime_error("wrong payload");
      },
      2000ms, with_nccl_semantics);
  CHECK(fixed[0] == "");
  CHECK(fixed[1] == "");
}
