#pragma once
// Waiting for the next message without paying for a thread wake-up.
//
// A detached actor whose mailbox is empty blocks on a condition variable;
// its thread takes far longer to run again once a message is sent to it
// than a hop between two awake actors (on virtual machines, where the
// sleeping vCPU must be scheduled again, most of all), and that latency sits
// on the critical path of every pipeline hand-off. An actor that expects a message
// soon may instead poll its mailbox for a bounded time before it returns to
// CAF and blocks. That is only free when every busy thread has a core of its
// own: `spin_budget` turns spinning off when the threads outnumber the cores.
// No CAF in this header.

#include <chrono>
#include <thread>

namespace merak::actors {

// How long an idle actor polls before it blocks: `requested_us` >= 0 is taken
// as given (0 = never spin); a negative value means "automatic": 200 us when
// `busy_threads` fit on the machine's cores, else 0.
inline std::chrono::microseconds spin_budget(int requested_us, int busy_threads) {
  if (requested_us >= 0) return std::chrono::microseconds(requested_us);
  int cores = int(std::thread::hardware_concurrency());
  return std::chrono::microseconds(busy_threads <= cores ? 200 : 0);
}

// Polls `arrived()` until it is true or `budget` has passed; returns whether
// it arrived. The first few microseconds poll with a CPU pause only (a
// neighbour's answer usually lands within them while both are awake;
// docs/results/distributed-runtime.md, "Transport choices"); after that
// each round yields the core, so that a thread that needs it (another
// process, a reducer, the coordinator) runs instead of waiting for this one's
// time slice to end.
template <typename Arrived>
bool spin_until(Arrived&& arrived, std::chrono::microseconds budget) {
  if (budget.count() <= 0) return arrived();
  auto start = std::chrono::steady_clock::now();
  auto until = start + budget;
  auto pure = start + std::chrono::microseconds(5);
  for (;;) {
    for (int i = 0; i < 64; ++i) {
      if (arrived()) return true;
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
    }
    auto now = std::chrono::steady_clock::now();
    if (now >= until) return arrived();
    if (now >= pure) std::this_thread::yield();
  }
}

}  // namespace merak::actors
