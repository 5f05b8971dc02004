#pragma once
// --overlap-param-gather: the all-gathers of a step's updated values run in
// the reducer while the stage goes on into the next step, and the stage
// takes each bucket's values only just before the first forward node that
// reads them. gather_progress is what the two threads share: which
// buckets' all-gathers are done. Only the stage writes parameter values
// (it copies a finished bucket in itself), so no value is written while
// another thread reads it.

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

// The all-gathers of one round of updated values, by bucket.
class gather_progress : public progress_signal {
 public:
  // A new round of `buckets` all-gathers, none done.
  void begin(int buckets) {
    update([&] { done_.assign(size_t(buckets), 0); });
  }
  // Bucket b's all-gather finished (the reducer's thread).
  void finish(int b) {
    update([&] {
      if (b >= 0 && size_t(b) < done_.size()) done_[size_t(b)] = 1;
    });
  }
  // Blocks until bucket b's all-gather finished; throws if they failed.
  void wait(int b) {
    progress_signal::wait([&] { return size_t(b) < done_.size() && done_[size_t(b)]; },
                          "all-gather of updated values");
  }

 private:
  std::vector<char> done_;
};

// Work a reducer finishes in the order it was handed over, counted over
// the run, for a stage that waits for the n-th: the reductions of gradient
// shards (a backward waits for its oldest bucket instead of piling up
// bucket copies the reducer has not reached) and the all-gathers of
// parameter shards (a node waits for its parameters). The reducer drops
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
