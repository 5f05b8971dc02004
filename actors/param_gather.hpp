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

class gather_progress {
 public:
  // A new round of `buckets` all-gathers, none done.
  void begin(int buckets) {
    std::lock_guard lock(mu_);
    done_.assign(size_t(buckets), 0);
  }
  // Bucket b's all-gather finished (the reducer's thread).
  void finish(int b) {
    {
      std::lock_guard lock(mu_);
      if (b >= 0 && size_t(b) < done_.size()) done_[size_t(b)] = 1;
    }
    cv_.notify_all();
  }
  // The all-gathers cannot finish: every wait throws merak::error with `why`.
  void fail(std::string why) {
    {
      std::lock_guard lock(mu_);
      failed_ = std::move(why);
    }
    cv_.notify_all();
  }
  // Blocks until bucket b's all-gather finished; throws if they failed.
  void wait(int b) {
    std::unique_lock lock(mu_);
    cv_.wait(lock,
             [&] { return !failed_.empty() || (size_t(b) < done_.size() && done_[size_t(b)]); });
    if (!failed_.empty()) merak::fail("all-gather of updated values: {}", failed_);
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<char> done_;
  std::string failed_;
};

// Gradient shards: the reductions a reducer has finished, counted over the
// run, so that a stage may wait inside a backward for its oldest bucket
// instead of piling up bucket copies the reducer has not reached. The
// reducer drops its hold on a bucket's buffer before counting it.
class reduction_progress {
 public:
  void finish_one() {
    {
      std::lock_guard lock(mu_);
      ++done_;
    }
    cv_.notify_all();
  }
  void fail(std::string why) {
    {
      std::lock_guard lock(mu_);
      failed_ = std::move(why);
    }
    cv_.notify_all();
  }
  // Blocks until at least n reductions finished; throws if they failed.
  void wait_for(int64_t n) {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return !failed_.empty() || done_ >= n; });
    if (done_ < n) merak::fail("gradient reduction: {}", failed_);
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int64_t done_ = 0;
  std::string failed_;
};

}  // namespace merak::actors
