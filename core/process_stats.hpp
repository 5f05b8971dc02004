#pragma once
// Process resource figures for benchmarks and metrics.

#include <cstdint>

namespace merak {

// Peak resident set size of this process so far, in bytes (VmHWM), or 0
// where /proc is unavailable.
int64_t peak_rss_bytes();

// Current resident set size in bytes (VmRSS), or 0.
int64_t current_rss_bytes();

}  // namespace merak
