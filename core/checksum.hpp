#pragma once
// CRC-32C (Castagnoli) of a byte range, used to detect truncated or corrupted
// checkpoint files. Uses the SSE4.2 instruction where the CPU has it.

#include <cstddef>
#include <cstdint>

namespace merak {

// Returns the CRC-32C of [data, data + size), continuing from `crc` (0 to
// start). Thread-safe.
uint32_t crc32c(const void* data, size_t size, uint32_t crc = 0);

// Whether two secrets (job tokens) are equal, in time that does not depend
// on where they differ.
bool same_secret(const char* a, size_t a_size, const char* b, size_t b_size);

}  // namespace merak
