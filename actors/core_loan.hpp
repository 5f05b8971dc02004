#pragma once
// RAII over a core_pool (core_pool.hpp) for one stage actor's thread: the
// cores an op computes on, and the marks of work done outside ops. No CAF.

#include <omp.h>

#include "actors/core_pool.hpp"

namespace merak::actors {

// The cores an op computes on: the stage's own (`own`, pool index `me`),
// plus up to `max` idle stages' cores until the compute is done. Then the
// stage's own go back too if it has nothing else to run now, before the
// outputs are handed on. Resizes the calling thread's OpenMP team. A null
// pool: nothing to lend.
class core_loan {
 public:
  core_loan(core_pool* pool, int me, int own, int max)
      : pool_(pool), me_(me), own_(own), max_(max) {
    if (!pool_) return;
    pool_->wake(me_);
    extra_ = pool_->borrow(max_);
    if (extra_ > 0) omp_set_num_threads(own_ + extra_);  // this thread's team only
  }
  core_loan(const core_loan&) = delete;
  core_loan& operator=(const core_loan&) = delete;
  ~core_loan() { compute_done(false); }

  // Whether the loan still holds the pool (until compute_done).
  bool active() const { return pool_ != nullptr; }

  // Between two nodes of the op (the executor's node hook; core_pool::
  // rebalance): a stage that runs out of work helps the computing one from
  // the next node on, and gets its core back at the next node boundary
  // when work reaches it, instead of at the op's end.
  void rebalance() {
    if (!pool_) return;
    int held = pool_->rebalance(extra_, max_);
    if (held == extra_) return;
    extra_ = held;
    omp_set_num_threads(own_ + extra_);
  }

  // `more_work`: the stage has another op it can run now.
  void compute_done(bool more_work) {
    if (!pool_) return;
    if (extra_ > 0) omp_set_num_threads(own_);
    pool_->give(extra_);
    if (!more_work) pool_->sleep(me_);
    pool_ = nullptr;
  }

 private:
  core_pool* pool_;
  int me_, own_, max_, extra_ = 0;
};

// A stage working outside its ops (summing reduced buckets into its
// gradients, the optimizer step): its own cores are busy meanwhile, so a
// stage that borrowed them while it was idle hands them back at its next
// node (core_pool::rebalance), and free again afterwards.
class core_busy {
 public:
  core_busy(core_pool* pool, int me) : pool_(pool), me_(me) {
    if (pool_) pool_->wake(me_);
  }
  core_busy(const core_busy&) = delete;
  core_busy& operator=(const core_busy&) = delete;
  ~core_busy() {
    if (pool_) pool_->sleep(me_);
  }

 private:
  core_pool* pool_;
  int me_;
};

}  // namespace merak::actors
