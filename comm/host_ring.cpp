#include "comm/host_ring.hpp"

#include "core/error.hpp"

namespace merak::comm {

host_ring::host_ring(void* region, size_t capacity, std::shared_ptr<void> keep)
    : ctl_(static_cast<control*>(region)),
      data_(static_cast<std::byte*>(region) + kalign),
      capacity_(capacity),
      keep_(std::move(keep)) {
  MERAK_CHECK(region && capacity > 0 && capacity % kalign == 0,
              "host ring of {} bytes (a positive multiple of {})", capacity, kalign);
  MERAK_CHECK(reinterpret_cast<uintptr_t>(region) % kalign == 0, "host ring region not aligned");
  // Zeroed memory is a ring with nothing released yet, which is also what a
  // freshly constructed control word holds: no placement new races the
  // other side's use.
}

std::optional<uint64_t> host_ring::reserve(size_t n) {
  const size_t need = block_bytes(n);
  if (need > capacity_) return std::nullopt;
  uint64_t pos = head_;
  if (pos % capacity_ + need > capacity_) pos += capacity_ - pos % capacity_;  // next lap
  // The block must end before the oldest byte still unread, a lap on; with
  // nothing unread, anywhere fits.
  const uint64_t released = ctl_->released.load(std::memory_order_acquire);
  if (released != head_ && pos + need - released > capacity_) return std::nullopt;
  head_ = pos + need;
  return pos;
}

void host_ring::release(uint64_t pos, size_t n) {
  ctl_->released.store(pos + block_bytes(n), std::memory_order_release);
}

}  // namespace merak::comm
