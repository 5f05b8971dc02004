#pragma once
// Lending idle cores to the stage that is computing.
//
// Each stage actor owns `own` cores of the process. A pipeline leaves cores
// idle by construction: at the start of a step only stage 0 has work (the
// others wait for its first forward), at the end only stage 0 has the last
// backward left, and with unequal stages the faster one waits. A stage that
// starts an op while other stages' cores are idle borrows them for that op
// (its OpenMP team grows).
//
// A stage's own cores count as busy from the moment work is handed to it
// (the sender marks it before sending, so that a stage starting an op at the
// same instant does not borrow the core the receiver is about to need) until
// it finds nothing to run. Borrowed cores go back once the op's compute is
// done, before its outputs are handed on.
//
// The count is advisory: a stage that gets work while its core is lent still
// runs, and the machine is oversubscribed until the borrower's op ends (one
// op at most). Borrowing changes how a kernel splits its work between
// threads, so results may differ in the last bits from a run without it (the
// same tolerance as any change of thread count). No CAF in this header.

#include <algorithm>
#include <atomic>
#include <memory>

namespace merak::actors {

class core_pool {
 public:
  // `cores` in all, `stages` stage actors of `own` cores each, all idle.
  core_pool(int cores, int stages, int own)
      : free_(cores), own_(own), busy_(std::make_unique<std::atomic<bool>[]>(size_t(stages))) {
    for (int i = 0; i < stages; ++i) busy_[i] = false;
  }

  // Stage `i` has (or is about to get) work: its own cores are busy.
  void wake(int i) {
    if (!busy_[i].exchange(true, std::memory_order_acq_rel))
      free_.fetch_sub(own_, std::memory_order_acq_rel);
  }
  // Stage `i` has nothing it can run: its own cores are free.
  void sleep(int i) {
    if (busy_[i].exchange(false, std::memory_order_acq_rel))
      free_.fetch_add(own_, std::memory_order_acq_rel);
  }

  // Up to `extra` idle cores for one op; returns how many it got.
  int borrow(int extra) {
    int left = free_.load(std::memory_order_acquire);
    int want = std::min(extra, left);
    while (want > 0) {
      if (free_.compare_exchange_weak(left, left - want, std::memory_order_acq_rel)) return want;
      want = std::min(extra, left);
    }
    return 0;
  }
  // Borrowed cores back.
  void give(int n) { free_.fetch_add(n, std::memory_order_acq_rel); }

  // A borrower holding `held` extra cores (at most `max`), between two
  // pieces of its op: cores that went idle since are borrowed, and cores
  // whose stage got work meanwhile (the count is below zero: the machine
  // is oversubscribed) go back. Returns how many it holds now.
  int rebalance(int held, int max) {
    int left = free_.load(std::memory_order_acquire);
    if (left < 0 && held > 0) {
      int back = std::min(held, -left);
      give(back);
      return held - back;
    }
    if (left > 0 && held < max) return held + borrow(max - held);
    return held;
  }

  int free_cores() const { return free_.load(std::memory_order_acquire); }
  // Whether stage `i` is idle and its cores are lent right now: then it
  // should not poll for messages on them.
  bool lent_away(int i) const {
    return !busy_[i].load(std::memory_order_acquire) && free_cores() < own_;
  }

 private:
  std::atomic<int> free_;
  int own_;
  std::unique_ptr<std::atomic<bool>[]> busy_;
};

}  // namespace merak::actors
