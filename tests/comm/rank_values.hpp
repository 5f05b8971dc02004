#pragma once
// Exactly known per-rank data and a byte hash, for the multi-process drivers
// of the transports (UCX: tests/comm/multiproc_driver.cpp, NCCL:
// tests/gpu/nccl_driver.cpp): every rank can compute every other rank's
// input and check sums and gathers without exchanging it.

#include <cstddef>
#include <cstdint>

namespace merak::comm::testing {

// Rank r's value at element i: varied signs and magnitudes in [-1000, 1000].
inline float value(int r, size_t i) {
  uint64_t h = (i + 1) * 0x9E3779B97F4A7C15ull ^ (uint64_t(r) + 1) * 0xBF58476D1CE4E5B9ull;
  h ^= h >> 29;
  return static_cast<float>(static_cast<int64_t>(h % 2000001) - 1000000) * 1e-3f;
}

// Bytes rank r of P sends in a recursive-doubling all-reduce of `bytes`
// (comm/collectives.hpp, ring_options::doubling_max_bytes): with p2 the
// largest power of two <= P, a folded rank (r >= p2) sends its buffer once;
// the others send it in each of log2(p2) rounds, and ranks below P - p2 once
// more (the result, back to r + p2).
inline uint64_t doubling_bytes(int P, int r, uint64_t bytes) {
  if (P == 1) return 0;
  int p2 = 1, rounds = 0;
  while (p2 * 2 <= P) p2 *= 2, ++rounds;
  if (r >= p2) return bytes;
  return bytes * uint64_t(rounds + (r < P - p2 ? 1 : 0));
}

// FNV-1a over n bytes: equal results on every rank are checked by hash.
inline uint64_t fnv(const void* p, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; ++i)
    h = (h ^ static_cast<const unsigned char*>(p)[i]) * 1099511628211ull;
  return h;
}

}  // namespace merak::comm::testing
