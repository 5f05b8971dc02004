#pragma once
// A stand-in device for testing the device paths of merak's code without a
// GPU, registered as cuda:0 to cuda:3: its memory is host pages mapped PROT_NONE,
// opened only inside its own memory operations and its backend's calls
// (the CPU backend's), so code that touches a device tensor's data directly
// faults. A run on it must equal the CPU run bit for bit. Register it once
// per process, before any tensor of it exists.

#include <cstddef>

namespace merak::test {

void register_stand_in_device();
// Copies between the host and the stand-in so far.
long stand_in_host_copies();
// The page-rounded length the stand-in maps for `bytes`.
size_t stand_in_mapping(size_t bytes);

}  // namespace merak::test
