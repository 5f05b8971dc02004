#pragma once
// Deterministic, counter-based random numbers.
//
// Every random draw in merak (weight initialisation, data windows) comes from
// a stream identified by (seed, stream id) and a position, so that a run can
// be resumed exactly from a checkpoint that stores only those integers, and
// so that a parallel run draws the same numbers as the single-device run.

#include <cmath>
#include <cstdint>

namespace merak {

// SplitMix64 finaliser: a bijective mixer of 64-bit integers.
constexpr uint64_t mix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

class rng {
 public:
  rng(uint64_t seed, uint64_t stream, uint64_t position = 0)
      : key_(mix64(seed ^ mix64(stream + 0x632BE59BD9B4E019ull))), pos_(position) {}

  uint64_t next_u64() { return mix64(key_ + mix64(pos_++)); }
  // Uniform in [0, 1).
  double uniform() { return double(next_u64() >> 11) * 0x1.0p-53; }
  // Uniform integer in [0, n), n > 0 (bias below 2^-32 for n < 2^32).
  uint64_t below(uint64_t n) { return uint64_t((unsigned __int128)next_u64() * n >> 64); }
  // Standard normal by Box-Muller (consumes two draws).
  double normal() {
    double u1 = uniform(), u2 = uniform();
    if (u1 < 1e-300) u1 = 1e-300;
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }
  uint64_t position() const { return pos_; }

 private:
  uint64_t key_;
  uint64_t pos_;
};

}  // namespace merak
