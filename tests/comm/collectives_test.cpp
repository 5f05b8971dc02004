#include <catch2/catch.hpp>

#include <chrono>
#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#include "comm/collectives.hpp"
#include "comm_test_util.hpp"
#include "rank_values.hpp"

using namespace merak::comm;
using merak::comm::testing::doubling_bytes;
using merak::comm::testing::run_ranks;
using namespace std::chrono_literals;

namespace {

// Rank r's value at element i: varied signs and magnitudes, exactly known.
float value(int r, size_t i) {
  uint64_t h = (i + 1) * 0x9E3779B97F4A7C15ull ^ (uint64_t(r) + 1) * 0xBF58476D1CE4E5B9ull;
  h ^= h >> 29;
  return static_cast<float>(static_cast<int64_t>(h % 2000001) - 1000000) * 1e-3f *
         (1.0f + static_cast<float>(r));
}

void check_allreduce(int P, size_t n, const ring_options& o) {
  std::vector<std::vector<float>> out(P);
  std::vector<uint64_t> sent(P);
  auto errors = run_ranks(P, [&](transport& t) {
    std::vector<float> x(n);
    for (size_t i = 0; i < n; ++i) x[i] = value(t.rank(), i);
    allreduce_sum(t, x, 11, o);
    out[t.rank()] = std::move(x);
    sent[t.rank()] = t.bytes_sent();
  });
  for (int r = 0; r < P; ++r) REQUIRE(errors[r] == "");
  for (size_t i = 0; i < n; ++i) {
    double ref = 0, mag = 0;
    for (int r = 0; r < P; ++r) {
      ref += value(r, i);
      mag += std::abs(value(r, i));
    }
    // P-1 float additions, each within half an ulp of a partial sum <= mag.
    REQUIRE(std::abs(out[0][i] - ref) <= P * 6e-8 * mag + 1e-30);
  }
  for (int r = 1; r < P; ++r)
    REQUIRE((n == 0 || std::memcmp(out[r].data(), out[0].data(), n * sizeof(float)) == 0));
  if (P == 1 || n == 0) {
    for (int r = 0; r < P; ++r) REQUIRE(sent[r] == 0);
  } else if (n * 4 <= o.doubling_max_bytes) {  // recursive doubling: exact
    for (int r = 0; r < P; ++r) REQUIRE(sent[r] == doubling_bytes(P, r, n * 4));
  } else {
    // Ring: each rank sends P-1 segments in each phase; segments differ by at
    // most one element: 2(P-1)/P n 4 bytes up to rounding.
    for (int r = 0; r < P; ++r) {
      const double expect = 2.0 * (P - 1) / P * n * 4;
      REQUIRE(std::abs(double(sent[r]) - expect) <= 2.0 * (P - 1) * 4);
    }
  }
}

// Every rank's result of allreduce_sum with options `o`, values exact in any
// summation order (multiples of 1/4, small): different algorithms must agree
// bit for bit.
std::vector<std::vector<float>> exact_sums(int P, size_t n, const ring_options& o) {
  std::vector<std::vector<float>> out(P);
  auto errors = run_ranks(P, [&](transport& t) {
    std::vector<float> x(n);
    for (size_t i = 0; i < n; ++i) x[i] = 0.25f * float(int((i * 7 + 3 * t.rank()) % 41) - 20);
    allreduce_sum(t, x, 12, o);
    out[t.rank()] = std::move(x);
  });
  for (int r = 0; r < P; ++r) REQUIRE(errors[r] == "");
  return out;
}

constexpr size_t kalways = ~size_t{0};  // doubling_max_bytes: recursive doubling at every size

}  // namespace

TEST_CASE("ring allreduce_sum matches the reference sum with equal bits on every rank",
          "[comm][collectives]") {
  for (int P = 1; P <= 8; ++P)
    for (size_t n : {size_t{0}, size_t{1}, size_t(P > 1 ? P - 1 : 1), size_t{7}, size_t{1000},
                     size_t{12347}}) {
      INFO("P = " << P << ", n = " << n);
      check_allreduce(P, n, ring_options{.doubling_max_bytes = 0});
      // Small chunks: many chunks per segment, pipelined over steps.
      check_allreduce(P, n, ring_options{64, 3, 0});
    }
}

TEST_CASE("recursive doubling matches the reference sum with equal bits on every rank",
          "[comm][collectives]") {
  // P = 1..5: powers of two and the fold of P - p2 extra ranks (3, 5).
  for (int P = 1; P <= 5; ++P)
    for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{1000}, size_t{12347}}) {
      INFO("P = " << P << ", n = " << n);
      check_allreduce(P, n, ring_options{.doubling_max_bytes = kalways});
    }
}

TEST_CASE("recursive doubling gives the ring's result, and at P = 2 the ring's exact bits",
          "[comm][collectives]") {
  for (int P = 1; P <= 5; ++P)
    for (size_t n : {size_t{1}, size_t{5}, size_t{999}}) {
      INFO("P = " << P << ", n = " << n);
      const auto ring = exact_sums(P, n, ring_options{64, 3, 0});
      const auto doubling = exact_sums(P, n, ring_options{64, 3, kalways});
      for (int r = 0; r < P; ++r) REQUIRE(doubling[r] == ring[r]);
    }
  // Arbitrary values: at P = 2 both add the two ranks' values once (float
  // addition commutes), so even rounding agrees.
  for (size_t n : {size_t{1}, size_t{1000}}) {
    std::vector<std::vector<float>> got[2];
    for (int alg = 0; alg < 2; ++alg) {
      got[alg].resize(2);
      auto errors = run_ranks(2, [&](transport& t) {
        std::vector<float> x(n);
        for (size_t i = 0; i < n; ++i) x[i] = value(t.rank(), i);
        allreduce_sum(t, x, 13, ring_options{.doubling_max_bytes = alg ? kalways : 0});
        got[alg][t.rank()] = std::move(x);
      });
      REQUIRE(errors[0] == "");
      REQUIRE(errors[1] == "");
    }
    for (int r = 0; r < 2; ++r)
      REQUIRE(std::memcmp(got[0][r].data(), got[1][r].data(), n * 4) == 0);
  }
}

TEST_CASE("buffers up to doubling_max_bytes go by recursive doubling, larger ones by the ring",
          "[comm][collectives]") {
  // At P = 3 the two differ in bytes: rank 0 sends 2·n·4 by doubling (a round
  // and the result back to rank 2), 4/3·n·4 by the ring.
  const int P = 3;
  const size_t limit = 4000;  // bytes: 1,000 floats
  for (size_t n : {size_t{1000}, size_t{1001}}) {
    std::vector<uint64_t> sent(P);
    std::vector<std::vector<float>> out(P);
    auto errors = run_ranks(P, [&](transport& t) {
      std::vector<float> x(n, 1.0f);
      allreduce_sum(t, x, 14, ring_options{.doubling_max_bytes = limit});
      sent[t.rank()] = t.bytes_sent();
      out[t.rank()] = std::move(x);
    });
    for (int r = 0; r < P; ++r) {
      REQUIRE(errors[r] == "");
      REQUIRE(out[r] == std::vector<float>(n, 3.0f));
    }
    INFO("n = " << n << ", rank 0 sent " << sent[0]);
    if (n * 4 <= limit)
      CHECK(sent[0] == 2 * n * 4);
    else
      CHECK(std::abs(double(sent[0]) - 4.0 / 3.0 * double(n) * 4) <= 16);
  }
}

TEST_CASE("ring allreduce_sum of a large buffer sends 2(P-1)/P n 4 bytes per rank",
          "[comm][collectives]") {
  for (int P : {2, 3, 4}) {
    INFO("P = " << P);
    check_allreduce(P, (size_t{1} << 20) + 13, ring_options{1 << 16, 4, 0});
  }
}

TEST_CASE(
    "bf16 allreduce_sum rounds once per addition, sends half the bytes, equal bits everywhere",
    "[comm][collectives][bf16]") {
  using merak::bf16;
  using merak::to_bf16;
  using merak::to_f32;
  for (int P : {1, 2, 3, 4})
    for (size_t doubling : {size_t{0}, kalways}) {
      const size_t n = 5000;
      const ring_options o{.doubling_max_bytes = doubling};
      std::vector<std::vector<bf16>> out(P);
      std::vector<uint64_t> sent(P);
      auto errors = run_ranks(P, [&](transport& t) {
        std::vector<bf16> x(n);
        for (size_t i = 0; i < n; ++i) x[i] = to_bf16(value(t.rank(), i));
        allreduce_sum(t, x, 13, o);
        out[t.rank()] = std::move(x);
        sent[t.rank()] = t.bytes_sent();
      });
      INFO("P = " << P << (doubling ? ", recursive doubling" : ", ring"));
      for (int r = 0; r < P; ++r) REQUIRE(errors[r] == "");
      for (int r = 1; r < P; ++r)
        REQUIRE(std::memcmp(out[r].data(), out[0].data(), n * sizeof(bf16)) == 0);
      for (size_t i = 0; i < n; ++i) {
        double ref = 0, mag = 0;
        for (int r = 0; r < P; ++r) {
          ref += to_f32(to_bf16(value(r, i)));
          mag += std::abs(value(r, i));
        }
        // P - 1 roundings to bf16, each within half a bf16 ulp (at most
        // 2^-8 relative, bf16 having 8 significant bits) of a partial sum
        // <= mag.
        REQUIRE(std::abs(to_f32(out[0][i]) - ref) <= (P - 1) * 0x1p-8 * mag + 1e-30);
        // At P = 2 the one addition is rounded once: exactly the float sum, rounded.
        if (P == 2)
          REQUIRE(out[0][i].bits ==
                  to_bf16(to_f32(to_bf16(value(0, i))) + to_f32(to_bf16(value(1, i)))).bits);
      }
      if (P > 1 && doubling == 0) {
        const double expect = 2.0 * (P - 1) / P * n * 2;  // two bytes an element
        for (int r = 0; r < P; ++r) REQUIRE(std::abs(double(sent[r]) - expect) <= 2.0 * P * 2);
      }
    }
}

TEST_CASE("allreduce_or is the union of every rank's bitmap", "[comm][collectives]") {
  for (size_t doubling : {size_t{0}, kalways})
    for (int P = 1; P <= 8; ++P)
      for (size_t n : {size_t{1}, size_t{3}, size_t{100}}) {
        std::vector<std::vector<uint64_t>> out(P);
        auto errors = run_ranks(P, [&](transport& t) {
          std::vector<uint64_t> bits(n, 0);
          for (size_t i = 0; i < n; ++i) bits[i] = uint64_t{1} << ((i * 7 + t.rank()) % 64);
          allreduce_or(t, bits, 3, ring_options{16, 2, doubling});
          out[t.rank()] = bits;
        });
        for (int r = 0; r < P; ++r) REQUIRE(errors[r] == "");
        for (size_t i = 0; i < n; ++i) {
          uint64_t ref = 0;
          for (int r = 0; r < P; ++r) ref |= uint64_t{1} << ((i * 7 + r) % 64);
          for (int r = 0; r < P; ++r) REQUIRE(out[r][i] == ref);
        }
      }
}

TEST_CASE("allreduce_or_sum ORs the bitmap and sums the floats that follow it, in one ring",
          "[comm][collectives]") {
  for (size_t doubling : {size_t{0}, kalways})
    for (int P = 1; P <= 5; ++P)
      for (auto [words, floats] : {std::pair<size_t, size_t>{1, 1}, {3, 10}, {10, 101}, {0, 7}}) {
        std::vector<std::vector<uint64_t>> bits_out(P);
        std::vector<std::vector<float>> sum_out(P);
        auto errors = run_ranks(P, [&](transport& t) {
          const int r = t.rank();
          // One buffer: `words` u64, then `floats` f32 (as S2 lays them out).
          std::vector<std::byte> buf(words * 8 + floats * 4);
          std::span<uint64_t> bits(reinterpret_cast<uint64_t*>(buf.data()), words);
          std::span<float> sum(reinterpret_cast<float*>(buf.data() + words * 8), floats);
          for (size_t i = 0; i < words; ++i) bits[i] = uint64_t{1} << ((i * 13 + r) % 64);
          for (size_t i = 0; i < floats; ++i) sum[i] = 0.25f * float((i + 1) * (r + 1));
          const uint64_t before = t.bytes_sent();
          allreduce_or_sum(t, bits, sum, 4,
                           ring_options{16, 2, doubling});  // chunks across the edge
          const double sent = double(t.bytes_sent() - before);
          if (doubling) {  // one all-reduce of the whole buffer
            CHECK(sent == double(doubling_bytes(P, r, buf.size())));
          } else {  // one ring over both: 2(P-1)/P of the buffer, up to a word per segment
            const double ring = 2.0 * (P - 1) / P * double(buf.size());
            CHECK(std::abs(sent - ring) <= 2.0 * (P - 1) * 4);
          }
          bits_out[r].assign(bits.begin(), bits.end());
          sum_out[r].assign(sum.begin(), sum.end());
          if (words > 1) {  // the floats must follow the bitmap
            CHECK_THROWS_WITH(allreduce_or_sum(t, bits.first(1), sum, 5),
                              Catch::Contains("must follow the bitmap"));
          }
        });
        for (int r = 0; r < P; ++r) REQUIRE(errors[r] == "");
        for (int r = 0; r < P; ++r) {
          for (size_t i = 0; i < words; ++i) {
            uint64_t ref = 0;
            for (int k = 0; k < P; ++k) ref |= uint64_t{1} << ((i * 13 + k) % 64);
            REQUIRE(bits_out[r][i] == ref);
          }
          for (size_t i = 0; i < floats; ++i)  // multiples of 1/4: exact in any order
            REQUIRE(sum_out[r][i] == 0.25f * float((i + 1) * (P * (P + 1) / 2)));
        }
      }
}

TEST_CASE("allgather and allgatherv put every rank's block in rank order", "[comm][collectives]") {
  for (int P = 1; P <= 8; ++P) {
    std::vector<std::vector<int>> fixed(P);
    std::vector<std::vector<std::byte>> var(P);
    std::vector<std::vector<size_t>> sizes(P);
    auto errors = run_ranks(P, [&](transport& t) {
      const int r = t.rank();
      int mine[3] = {r, 10 * r, 100 * r};
      std::vector<int> all(3 * P);
      allgather(t, mine, sizeof mine, all.data(), 1);
      fixed[r] = all;
      // Rank r contributes r*5 bytes (rank 0 contributes nothing).
      std::vector<std::byte> block(r * 5, std::byte(r + 1));
      sizes[r] = allgatherv(t, block.data(), block.size(), var[r], 2);
    });
    for (int r = 0; r < P; ++r) REQUIRE(errors[r] == "");
    for (int r = 0; r < P; ++r) {
      for (int k = 0; k < P; ++k) {
        REQUIRE(fixed[r][3 * k] == k);
        REQUIRE(fixed[r][3 * k + 2] == 100 * k);
        REQUIRE(sizes[r][k] == size_t(5 * k));
      }
      size_t off = 0;
      for (int k = 0; k < P; ++k)
        for (int b = 0; b < 5 * k; ++b) REQUIRE(var[r][off++] == std::byte(k + 1));
      REQUIRE(off == var[r].size());
    }
  }
}

// Rank r's shard after reduce_scatter_sum, reference: the ring's order,
// starting from rank r+1's value and adding rank r's own last.
template <typename T, typename Add>
void check_reduce_scatter(int P, size_t n, const ring_options& o, T (*val)(int, size_t), Add add) {
  std::vector<std::vector<T>> out(P);
  std::vector<uint64_t> sent(P);
  auto errors = run_ranks(P, [&](transport& t) {
    std::vector<T> x(n);
    for (size_t i = 0; i < n; ++i) x[i] = val(t.rank(), i);
    reduce_scatter_sum(t, std::span<T>(x), 21, o);
    out[t.rank()] = std::move(x);
    sent[t.rank()] = t.bytes_sent();
  });
  size_t covered = 0;
  for (int r = 0; r < P; ++r) {
    REQUIRE(errors[r] == "");
    auto [b, e] = shard_range(n, P, r);
    REQUIRE(b == covered);
    covered = e;
    for (size_t i = b; i < e; ++i) {
      T ref = val((r + 1) % P, i);
      for (int k = 2; k <= P; ++k) ref = add(ref, val((r + k) % P, i));
      if (P == 1) ref = val(r, i);
      INFO("P " << P << " n " << n << " rank " << r << " element " << i);
      REQUIRE(std::memcmp(&out[r][i], &ref, sizeof(T)) == 0);
    }
    // (P-1) segments of at most ceil(n/P) elements.
    REQUIRE(sent[r] <= (P - 1) * ((n + P - 1) / P) * sizeof(T));
    REQUIRE(sent[r] + (P - 1) * sizeof(T) >= (P - 1) * (n / P) * sizeof(T));
  }
  REQUIRE(covered == n);
}

float quarter_value(int r, size_t i) {
  return value(r, i);
}

merak::bf16 bf16_value(int r, size_t i) {
  return merak::to_bf16(value(r, i));
}

TEST_CASE("reduce_scatter_sum leaves each rank its shard's sum in the ring's order, bit for bit",
          "[comm][collectives][sharded]") {
  ring_options small_chunks;
  small_chunks.chunk_bytes = 64;  // many chunks per segment: the pipelined path
  small_chunks.window = 2;
  for (int P = 1; P <= 8; ++P)
    for (size_t n : {size_t(0), size_t(1), size_t(P - 1), size_t(7), size_t(1000), size_t(4099)})
      for (const ring_options& o : {ring_options{}, small_chunks}) {
        check_reduce_scatter<float>(P, n, o, quarter_value, [](float a, float b) { return a + b; });
        check_reduce_scatter<merak::bf16>(P, n, o, bf16_value, [](merak::bf16 a, merak::bf16 b) {
          return merak::to_bf16(merak::to_f32(a) + merak::to_f32(b));
        });
      }
}

TEST_CASE("allgather_shards gives every rank every owner's shard, uneven sizes included",
          "[comm][collectives][sharded]") {
  for (int P = 1; P <= 8; ++P)
    for (size_t n : {size_t(0), size_t(1), size_t(P + 1), size_t(1001)}) {
      std::vector<std::vector<float>> out(P);
      std::vector<uint64_t> sent(P);
      auto errors = run_ranks(P, [&](transport& t) {
        std::vector<float> x(n, -1.0f);  // only the own shard is meaningful on entry
        auto [b, e] = shard_range(n, P, t.rank());
        for (size_t i = b; i < e; ++i) x[i] = value(t.rank(), i);
        allgather_shards(t, x.data(), n, sizeof(float), 22);
        out[t.rank()] = std::move(x);
        sent[t.rank()] = t.bytes_sent();
      });
      for (int r = 0; r < P; ++r) {
        REQUIRE(errors[r] == "");
        for (int owner = 0; owner < P; ++owner) {
          auto [b, e] = shard_range(n, P, owner);
          for (size_t i = b; i < e; ++i) REQUIRE(out[r][i] == value(owner, i));
        }
        // The ring passes on every shard but the next rank's (it starts there).
        auto [b, e] = shard_range(n, P, (r + 1) % P);
        REQUIRE(sent[r] == (P == 1 ? 0 : (n - (e - b)) * sizeof(float)));
      }
    }
}

TEST_CASE("allgather_shards_bf16 sends bf16 outside the exact ranges and keeps the own shard",
          "[comm][collectives][sharded]") {
  using range = std::pair<size_t, size_t>;
  for (int P = 1; P <= 6; ++P)
    for (size_t n : {size_t(0), size_t(1), size_t(P + 1), size_t(1001)}) {
      // No exact range, everything exact, and ranges crossing shard edges.
      std::vector<std::vector<range>> layouts = {{}, {{0, n}}};
      if (n > 10) {
        const size_t edge = P > 1 ? shard_range(n, P, 0).second : n / 3;  // rank 0's shard ends
        layouts.push_back({{0, 3}, {edge - 1, edge + 2}, {n / 2 + 5, n / 2 + 6}, {n - 4, n}});
      }
      for (auto& exact : layouts) {
        auto is_exact = [&](size_t i) {
          for (auto [b, e] : exact)
            if (i >= b && i < e) return true;
          return false;
        };
        std::vector<std::vector<float>> out(P);
        std::vector<uint64_t> sent(P);
        auto errors = run_ranks(P, [&](transport& t) {
          std::vector<float> x(n, -1.0f);
          auto [b, e] = shard_range(n, P, t.rank());
          for (size_t i = b; i < e; ++i) x[i] = value(t.rank(), i);
          allgather_shards_bf16(t, x, exact, 23);
          out[t.rank()] = std::move(x);
          sent[t.rank()] = t.bytes_sent();
        });
        size_t wire = 0;  // all shards' bytes on the wire
        for (size_t i = 0; i < n; ++i) wire += is_exact(i) ? 4 : 2;
        for (int r = 0; r < P; ++r) {
          REQUIRE(errors[r] == "");
          for (int owner = 0; owner < P; ++owner) {
            auto [b, e] = shard_range(n, P, owner);
            for (size_t i = b; i < e; ++i) {
              const float v = value(owner, i);
              const float want =
                  owner == r || is_exact(i) ? v : merak::to_f32(merak::to_bf16(v));
              REQUIRE(out[r][i] == want);
            }
          }
          // The ring passes on every shard but the next rank's.
          auto [b, e] = shard_range(n, P, (r + 1) % P);
          size_t next = 0;
          for (size_t i = b; i < e; ++i) next += is_exact(i) ? 4 : 2;
          REQUIRE(sent[r] == (P == 1 ? 0 : wire - next));
        }
      }
    }
  // Ranges out of order are refused before any traffic.
  auto errors = run_ranks(2, [&](transport& t) {
    std::vector<float> x(10);
    std::vector<range> bad = {{4, 6}, {2, 3}};
    allgather_shards_bf16(t, x, bad, 24);
  });
  for (auto& e : errors) REQUIRE(e.find("not sorted") != std::string::npos);
}

TEST_CASE("broadcast copies the root's buffer to every rank, for every root",
          "[comm][collectives]") {
  for (int P = 1; P <= 6; ++P)
    for (int root = 0; root < P; ++root) {
      std::vector<std::vector<uint8_t>> out(P);
      auto errors = run_ranks(P, [&](transport& t) {
        std::vector<uint8_t> buf(1001, 0);
        if (t.rank() == root)
          for (size_t i = 0; i < buf.size(); ++i) buf[i] = uint8_t(i * 3 + root);
        broadcast(t, buf.data(), buf.size(), root, 9, 100);
        out[t.rank()] = buf;
      });
      for (int r = 0; r < P; ++r) {
        REQUIRE(errors[r] == "");
        for (size_t i = 0; i < 1001; ++i) REQUIRE(out[r][i] == uint8_t(i * 3 + root));
      }
    }
}

TEST_CASE("a rank that never joins makes allreduce fail within the timeout, naming the peer",
          "[comm][collectives]") {
  const auto timeout = 300ms;
  const size_t doubling = GENERATE(size_t{0}, kalways);
  auto t0 = std::chrono::steady_clock::now();
  auto errors = run_ranks(
      3,
      [&](transport& t) {
        if (t.rank() == 2) return;  // never sends; its endpoint stays open
        std::vector<float> x(100, 1.0f);
        allreduce_sum(t, x, 4, ring_options{.doubling_max_bytes = doubling});
      },
      timeout);
  // Keep this below the default test time-outs: each waiting rank fails
  // after at most a few timeouts, never hangs.
  CHECK(std::chrono::steady_clock::now() - t0 < 5s);
  CHECK(errors[2] == "");
  // Rank 0 receives from rank 2 first: its left neighbour in the ring, the
  // rank it folds in by recursive doubling.
  CHECK_THAT(errors[0], Catch::Contains("allreduce_sum") && Catch::Contains("rank 0") &&
                            Catch::Contains("peer 2") && Catch::Contains("timed out"));
  CHECK_THAT(errors[1], Catch::Contains("rank 1") && Catch::Contains("timed out"));
}

TEST_CASE("collectives refuse tags that do not fit the tag layout", "[comm][collectives]") {
  CHECK(collective_tag(5, 3) == (tag_t{5} << 16 | 3));
  CHECK_THROWS_WITH(collective_tag(kmax_collective_tag, 0), Catch::Contains("too large"));
}

TEST_CASE("comm_stream runs queued collectives in order while the caller goes on",
          "[comm][collectives]") {
  const int P = 4;
  std::vector<std::vector<float>> a(P, std::vector<float>(5000)), b(P, std::vector<float>(333));
  std::vector<char> first_ready(P, 0);  // Catch's checks are not thread-safe
  auto errors = run_ranks(P, [&](transport& t) {
    const int r = t.rank();
    for (size_t i = 0; i < a[r].size(); ++i) a[r][i] = float(r + i);
    for (size_t i = 0; i < b[r].size(); ++i) b[r][i] = float(r * i);
    comm_stream stream(t);
    auto h1 = stream.enqueue([&](transport& ep) { allreduce_sum(ep, a[r], 1); });
    auto h2 = stream.enqueue([&](transport& ep) { allreduce_sum(ep, b[r], 2); });
    h2.wait();
    first_ready[r] = h1.ready();  // FIFO: done before the second
    h1.wait();
  });
  for (int r = 0; r < P; ++r) REQUIRE(errors[r] == "");
  for (int r = 0; r < P; ++r) CHECK(first_ready[r]);
  for (int r = 0; r < P; ++r) {
    CHECK(a[r][10] == float(0 + 1 + 2 + 3 + 4 * 10));
    CHECK(b[r][7] == float((0 + 1 + 2 + 3) * 7));
  }
}

TEST_CASE("a comm_stream handle rethrows the collective's error", "[comm][collectives]") {
  auto errors = run_ranks(
      2,
      [&](transport& t) {
        if (t.rank() == 1) return;
        comm_stream stream(t);
        std::vector<float> x(10, 1.0f);
        auto h = stream.enqueue([&](transport& ep) { allreduce_sum(ep, x, 6); });
        h.wait();
      },
      200ms);
  CHECK_THAT(errors[0], Catch::Contains("peer 1"));
}

#ifdef MERAK_WITH_UCX
#include "comm/ucx_transport.hpp"

TEST_CASE("ucx_tls_without_cma swaps shared memory for posix and drops cma", "[ucx]") {
  using merak::comm::ucx_tls_without_cma;
  CHECK(ucx_tls_without_cma("sm,self") == "posix,self");
  CHECK(ucx_tls_without_cma("shm,tcp,self") == "posix,tcp,self");
  CHECK(ucx_tls_without_cma("posix,cma,self") == "posix,self");
  CHECK(ucx_tls_without_cma("self,sm,posix") == "self,posix");  // no duplicate
  CHECK(ucx_tls_without_cma("tcp,self").empty());               // nothing to change
  CHECK(ucx_tls_without_cma("posix,self").empty());
  CHECK(ucx_tls_without_cma("").empty());          // UCX's default is left alone
  CHECK(ucx_tls_without_cma("^tcp").empty());      // exclusion lists too
  CHECK(ucx_tls_without_cma("cma,self").empty());  // cma was all there was
}
#endif

namespace {

// The sequence check on for one test.
struct checks_on {
  checks_on() { set_collective_checks(true); }
  ~checks_on() { set_collective_checks(false); }
};

bool all_contain(const std::vector<std::string>& errors, const std::string& what) {
  for (auto& e : errors)
    if (e.find(what) == std::string::npos) return false;
  return true;
}

}  // namespace

TEST_CASE("the sequence check lets matching collectives through and names mismatched ones",
          "[comm][collectives]") {
  checks_on on;
  const int P = 3;
  SECTION("matching calls run as without the check") {
    auto errors = run_ranks(P, [](transport& t) {
      std::vector<float> x(100, float(t.rank() + 1));
      allreduce_sum(t, std::span<float>(x), 7);
      for (float v : x) REQUIRE(v == 6.0f);
      std::vector<float> y(10, 1.0f);
      reduce_scatter_sum(t, std::span<float>(y), 8);
      barrier(t, 9);
      std::vector<std::byte> all;
      allgatherv(t, y.data(), sizeof(float) * size_t(t.rank()), all, 10);  // sizes differ
    });
    for (auto& e : errors) CHECK(e.empty());
  }
  SECTION("another collective on one rank") {
    auto errors = run_ranks(P, [](transport& t) {
      std::vector<float> x(100, 1.0f);
      if (t.rank() == 1)
        reduce_scatter_sum(t, std::span<float>(x), 7);
      else
        allreduce_sum(t, std::span<float>(x), 7);
    });
    CHECK(all_contain(errors, "collective sequence check"));
    CHECK(all_contain(errors, "rank 1 issued call 1, reduce_scatter_sum of 400 bytes (tag 7) where "
                              "rank 0 issued call 1, allreduce_sum of 400 bytes (tag 7)"));
  }
  SECTION("the calls named with the step their ranks were in") {
    auto errors = run_ranks(P, [](transport& t) {
      t.set_step(t.rank() == 2 ? 5 : 4);  // a label, not compared
      std::vector<float> x(100, 1.0f);
      allreduce_sum(t, std::span<float>(x), 7);
      allreduce_sum(t, std::span<float>(x), t.rank() == 1 ? 9 : 8);
    });
    CHECK(all_contain(errors, "rank 1 issued call 2 in step 4, allreduce_sum of 400 bytes (tag 9) "
                              "where rank 0 issued call 2 in step 4, allreduce_sum of 400 bytes "
                              "(tag 8)"));
  }
  SECTION("another size on one rank") {
    auto errors = run_ranks(P, [](transport& t) {
      std::vector<float> x(t.rank() == 2 ? 50 : 100, 1.0f);
      allreduce_sum(t, std::span<float>(x), 7);
    });
    CHECK(all_contain(errors, "collective sequence check"));
    CHECK(all_contain(errors, "rank 2 issued call 1, allreduce_sum of 200 bytes (tag 7) where rank "
                              "0 issued call 1, allreduce_sum of 400 bytes"));
  }
  SECTION("the same calls in another order (buckets reduced out of turn)") {
    auto errors = run_ranks(P, [](transport& t) {
      std::vector<float> a(64, 1.0f), b(64, 2.0f);
      const tag_t first = t.rank() == 0 ? 4 : 3, second = t.rank() == 0 ? 3 : 4;
      allreduce_sum(t, std::span<float>(a), first);
      allreduce_sum(t, std::span<float>(b), second);
    });
    CHECK(all_contain(errors, "collective sequence check"));
    CHECK(all_contain(errors, "rank 1 issued call 1, allreduce_sum of 256 bytes (tag 3) where rank 0 "
                              "issued call 1, allreduce_sum of 256 bytes (tag 4)"));
  }
}
