#pragma once
// Lending idle cores to the stage that is computing.
//
// Each stage actor owns `own` cores of the process (or of the host, when the
// stages of a replica live in several processes of one host). A pipeline leaves cores
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

// The pool's counters: in the pool (one process) or in memory shared by the
// processes of one host (shared_region), so that stage actors in different
// processes lend each other their cores as in one process.
struct core_pool_state {
  static constexpr int kmax_stages = 1024;
  std::atomic<int> free;
  int own;
  int stages;
  std::atomic<bool> busy[kmax_stages];
  // `cores` in all, `stages` stage actors of `own` cores each, all idle.
  void init(int cores, int n, int own_cores) {
    free.store(cores);
    own = own_cores;
    stages = n;
    for (int i = 0; i < n; ++i) busy[i].store(false);
  }
};
static_assert(std::atomic<int>::is_always_lock_free && std::atomic<bool>::is_always_lock_free,
              "the counters must work between processes");

class core_pool {
 public:
  // `cores` in all, `stages` stage actors of `own` cores each, all idle.
  core_pool(int cores, int stages, int own)
      : owned_(std::make_unique<core_pool_state>()), s_(owned_.get()) {
    s_->init(cores, stages, own);
  }
  // Over counters that live elsewhere (shared memory), already initialised;
  // `keep_alive` owns that memory.
  core_pool(core_pool_state* state, std::shared_ptr<void> keep_alive)
      : s_(state), keep_alive_(std::move(keep_alive)) {}

  // Stage `i` has (or is about to get) work: its own cores are busy.
  void wake(int i) {
    if (!s_->busy[i].exchange(true, std::memory_order_acq_rel))
      s_->free.fetch_sub(s_->own, std::memory_order_acq_rel);
  }
  // Stage `i` has nothing it can run: its own cores are free.
  void sleep(int i) {
    if (s_->busy[i].exchange(false, std::memory_order_acq_rel))
      s_->free.fetch_add(s_->own, std::memory_order_acq_rel);
  }

  // Up to `extra` idle cores for one op; returns how many it got.
  int borrow(int extra) {
    int left = s_->free.load(std::memory_order_acquire);
    int want = std::min(extra, left);
    while (want > 0) {
      if (s_->free.compare_exchange_weak(left, left - want, std::memory_order_acq_rel)) return want;
      want = std::min(extra, left);
    }
    return 0;
  }
  // Borrowed cores back.
  void give(int n) { s_->free.fetch_add(n, std::memory_order_acq_rel); }

  // A borrower holding `held` extra cores (at most `max`), between two
  // pieces of its op: cores that went idle since are borrowed, and cores
  // whose stage got work meanwhile (the count is below zero: the machine
  // is oversubscribed) go back. Returns how many it holds now.
  int rebalance(int held, int max) {
    int left = s_->free.load(std::memory_order_acquire);
    if (left < 0 && held > 0) {
      int back = std::min(held, -left);
      give(back);
      return held - back;
    }
    if (left > 0 && held < max) return held + borrow(max - held);
    return held;
  }

  int free_cores() const { return s_->free.load(std::memory_order_acquire); }
  // Whether stage `i` is idle and its cores are lent right now: then it
  // should not poll for messages on them.
  bool lent_away(int i) const {
    return !s_->busy[i].load(std::memory_order_acquire) && free_cores() < s_->own;
  }

 private:
  std::unique_ptr<core_pool_state> owned_;
  core_pool_state* s_;
  std::shared_ptr<void> keep_alive_;
};

}  // namespace merak::actors
