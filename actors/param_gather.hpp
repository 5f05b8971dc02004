#pragma once
// What a stage actor and its reducer share across their threads: how far
// the reducer has got with work the stage handed it, in the order handed
// over. Used for the all-gathers of values that a stage takes only just
// before a node reads them (--overlap-param-gather: a step's updated
// values gathered while the stage goes on into the next step; parameter
// shards: every node's values) and for the reductions of gradient shards.
// Only the stage writes parameter values (it copies a finished bucket in
// itself), so no value is written while another thread reads it.

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "core/error.hpp"

namespace merak::actors {

// What a reducer's thread has finished, for a stage's thread to wait on:
// `update` changes the state under the lock and wakes the waiters; `wait`
// blocks until `ready` holds or the work failed (then throws merak::error
// naming `what` and why).
class progress_signal {
 public:
  // The work cannot finish: every wait throws with `why`.
  void fail(std::string why) {
    update([&] { failed_ = std::move(why); });
  }

 protected:
  template <typename F>
  void update(F&& change) {
    {
      std::lock_guard lock(mu_);
      change();
    }
    cv_.notify_all();
  }
  template <typename Ready>
  void wait(Ready&& ready, const char* what) {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return !failed_.empty() || ready(); });
    if (!ready()) merak::fail("{}: {}", what, failed_);
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::string failed_;
};

// Work a reducer finishes in the order it was handed over, counted over
// the run, for a stage that waits for the n-th: the reductions of gradient
// shards (a backward waits for its oldest bucket instead of piling up
// bucket copies the reducer has not reached) and the all-gathers of values
// (a node waits for the buckets it reads). The reducer drops
// its hold on a buffer before counting it.
class count_progress : public progress_signal {
 public:
  // `what` names the work in errors ("gradient reduction").
  explicit count_progress(const char* what = "gradient reduction") : what_(what) {}
  void finish_one() {
    update([&] { ++done_; });
  }
  // Blocks until at least n finished; throws if they failed.
  void wait_for(int64_t n) {
    progress_signal::wait([&] { return done_ >= n; }, what_);
  }

 private:
  const char* what_;
  int64_t done_ = 0;
};

}  // namespace merak::actors
