#pragma once
// Liveness of a job's peers from their heartbeats: pure bookkeeping, driven
// by the caller's clock (actors/watchdog.hpp sends the beats and asks).
//
// A peer that has not been heard from for `limit` is overdue: its process is
// stopped (SIGSTOP), hung, or cut off. A dead process is found faster by its
// closed connection; heartbeats find the ones that stay connected but silent.

#include <chrono>
#include <vector>

namespace merak::job {

class heartbeats {
 public:
  using clock = std::chrono::steady_clock;
  // `peers` peers, all heard from at `now`.
  heartbeats(int peers, std::chrono::milliseconds limit, clock::time_point now)
      : last_(size_t(peers), now), limit_(limit) {}
  void heard(int peer, clock::time_point now) { last_.at(size_t(peer)) = now; }
  // The peer silent for longest if that is over the limit, else -1.
  int overdue(clock::time_point now) const {
    int worst = -1;
    for (size_t p = 0; p < last_.size(); ++p)
      if (now - last_[p] > limit_ && (worst < 0 || last_[p] < last_[size_t(worst)])) worst = int(p);
    return worst;
  }
  // How long `peer` has been silent.
  std::chrono::milliseconds silent(int peer, clock::time_point now) const {
    return std::chrono::duration_cast<std::chrono::milliseconds>(now - last_.at(size_t(peer)));
  }

 private:
  std::vector<clock::time_point> last_;
  std::chrono::milliseconds limit_;
};

}  // namespace merak::job
