#pragma once
// A one-way ring of bytes in memory that two processes of one host share:
// the tensor channel's path for tensors between processes on one host.
//
// The sender copies a tensor into the ring and tells the receiver where it
// lies (in the header it sends over the transport anyway); the receiver
// copies it out and frees the space. Both copies go through each process's
// own, long-lived mapping of the ring, so they run at memory speed, whereas
// a single-copy read of the sender's memory (cma: process_vm_readv) goes
// through the kernel page by page and can cost far more (virtual machines
// in particular) for buffers it has not read recently
// (docs/results/distributed-runtime.md).
//
// Positions count bytes since the ring was made and only grow; a block
// never wraps (a block that would is placed at the start of the next lap).
// One thread at a time produces (reserve), one consumes (release), in the
// order the blocks were reserved. The control word sits in the shared
// region, before the data. No CAF, no transport in this header.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>

namespace merak::comm {

class host_ring {
 public:
  static constexpr size_t kalign = 64;
  // The region a ring of `capacity` bytes (a multiple of kalign) needs.
  static size_t region_bytes(size_t capacity) { return kalign + capacity; }

  // Over `region` (region_bytes(capacity) bytes, zeroed before either side
  // used it, kalign-aligned); `keep` owns that memory.
  host_ring(void* region, size_t capacity, std::shared_ptr<void> keep);

  size_t capacity() const { return capacity_; }
  // Bytes a block of `n` bytes takes (n rounded up to kalign).
  static size_t block_bytes(size_t n) { return (n + kalign - 1) / kalign * kalign; }

  // Producer: the position of a free block of `n` bytes, or nothing when the
  // ring has not that much free space now (the receiver has not yet copied
  // out enough of the earlier blocks) or never will (n above the capacity).
  std::optional<uint64_t> reserve(size_t n);
  // Consumer: the block at `pos` of `n` bytes has been copied out; frees it
  // and every block reserved before it.
  void release(uint64_t pos, size_t n);

  // The block at `pos` (either side).
  std::byte* at(uint64_t pos) const { return data_ + pos % capacity_; }
  // Whether a block of `n` bytes at `pos` lies inside the ring (the
  // receiver's check of a peer's header).
  bool holds(uint64_t pos, size_t n) const {
    return n <= capacity_ && pos % kalign == 0 && pos % capacity_ + n <= capacity_;
  }

 private:
  struct control {
    std::atomic<uint64_t> released;  // every byte before this position is free
  };
  static_assert(sizeof(control) <= kalign);
  static_assert(std::atomic<uint64_t>::is_always_lock_free, "shared between processes");

  control* ctl_;
  std::byte* data_;
  size_t capacity_;
  uint64_t head_ = 0;  // producer's next position (its own, not shared)
  std::shared_ptr<void> keep_;
};

}  // namespace merak::comm
