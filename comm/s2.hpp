#pragma once
// The S2 codec (count sketch + packed bitmap of non-zero rows), made through
// make_codec with codec_kind::s2. Algorithm: docs/s2-reducer.md.

#include <cstdint>
#include <memory>

#include "comm/codec.hpp"

namespace merak::comm {

// The width w a config gives for an (n, d) gradient: config.sketch_width
// when set, else max(1, round(sketch_ratio · n·d / r)).
int64_t s2_sketch_width(const codec_config& config, int64_t n, int64_t d);

// The seed of step `step`'s hashes: the same on every rank.
uint64_t s2_step_seed(uint64_t seed, uint64_t step);

std::unique_ptr<codec> make_s2_codec(const codec_config& config);

}  // namespace merak::comm
