#pragma once
// Even contiguous shards: n elements over `parts` owners, owner k holding
// [begin, end) with the first n % parts shards one element longer. The
// split the sharded collectives (comm/collectives.hpp) and the distributed
// optimizer (model/distributed_adamw.hpp) share.

#include <algorithm>
#include <cstdint>
#include <utility>

namespace merak {

inline std::pair<int64_t, int64_t> even_shard(int64_t n, int64_t parts, int64_t k) {
  const int64_t q = n / parts, rem = n % parts;
  const int64_t b = k * q + std::min(k, rem);
  return {b, b + q + (k < rem ? 1 : 0)};
}

}  // namespace merak
