#pragma once
// Process resource figures for benchmarks and metrics.

#include <cstdint>

namespace merak {

// Peak resident set size of this process so far, in bytes (VmHWM), or 0
// where /proc is unavailable.
int64_t peak_rss_bytes();

// Current resident set size in bytes (VmRSS), or 0.
int64_t current_rss_bytes();

// Bytes this process may still allocate: the machine's available memory
// (MemAvailable), or less under an address-space limit (ulimit -v) what
// the process already maps; -1 where neither is known.
int64_t available_memory_bytes();

}  // namespace merak
