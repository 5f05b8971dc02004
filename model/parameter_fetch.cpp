#include "model/parameter_fetch.hpp"

#include <algorithm>

#include "core/error.hpp"

namespace merak::model {

parameter_fetcher::parameter_fetcher(std::vector<std::vector<int>> node_buckets, int first,
                                     int buckets, hooks h)
    : node_buckets_(std::move(node_buckets)),
      first_(first),
      hooks_(std::move(h)),
      state_(size_t(std::max(buckets, 0)), where::absent),
      held_(state_.size(), 0),
      fresh_(state_.size(), 0),
      pinned_(state_.size(), 0) {
  const int nodes = int(node_buckets_.size());
  std::vector<int> lo(state_.size(), nodes), hi(state_.size(), -1);
  for (int i = 0; i < nodes; ++i)
    for (int b : node_buckets_[size_t(i)]) {
      MERAK_CHECK(b >= 0 && b < buckets, "parameter fetcher: bucket {} of {}", b, buckets);
      lo[size_t(b)] = std::min(lo[size_t(b)], i);
      hi[size_t(b)] = std::max(hi[size_t(b)], i);
    }
  // Bucket b's runs over the nodes that read buckets, looking past those
  // that read only buckets in `past` (other than b).
  auto runs = [&](size_t b, const std::vector<char>& past) {
    int count = 0;
    bool in_run = false;
    for (auto& bs : node_buckets_) {
      bool reads_b = false, opaque = false;
      for (int c : bs) {
        reads_b = reads_b || size_t(c) == b;
        opaque = opaque || !past[size_t(c)];
      }
      if (reads_b) {
        count += in_run ? 0 : 1;
        in_run = true;
      } else if (opaque) {
        in_run = false;
      }
    }
    return count;
  };
  // Candidates: more than two runs, around another bucket's readers. The
  // most scattered first, each pinned if it still has more than two runs
  // when the nodes of those pinned before it are looked past (a tied weight
  // sharing a bucket with a layer stays unpinned though norms sit between
  // its readers).
  std::vector<char> none(state_.size(), 0);
  std::vector<std::pair<int, size_t>> candidates;  // (-runs, bucket)
  for (size_t b = 0; b < state_.size(); ++b) {
    const int r = hi[b] < 0 ? 0 : runs(b, none);
    if (r <= 2) continue;
    for (size_t c = 0; c < state_.size(); ++c)
      if (c != b && hi[c] >= 0 && lo[b] <= lo[c] && hi[c] <= hi[b]) {
        candidates.emplace_back(-r, b);
        break;
      }
  }
  std::sort(candidates.begin(), candidates.end());
  for (auto [r, b] : candidates)
    if (runs(b, pinned_) > 2) pinned_[b] = 1;
}

const std::vector<int>& parameter_fetcher::of(int n) const {
  MERAK_CHECK(n >= first_ && n - first_ < int(node_buckets_.size()),
              "parameter fetcher: node {} outside [{}, {})", n, first_,
              first_ + int(node_buckets_.size()));
  return node_buckets_[size_t(n - first_)];
}

int parameter_fetcher::held() const {
  return int(
      std::count_if(state_.begin(), state_.end(), [](where w) { return w != where::absent; }));
}

void parameter_fetcher::request(int b) {
  if (state_[size_t(b)] != where::absent) return;
  hooks_.request(b);
  state_[size_t(b)] = where::requested;
  pending_.push_back(b);
  fresh_[size_t(b)] = 1;
  ++requests_;
  most_held_ = std::max(most_held_, held());
}

void parameter_fetcher::take(int b) {
  if (state_[size_t(b)] != where::requested) return;
  // Gathers finish in request order: the ones before b are taken first.
  while (!pending_.empty()) {
    const int first = pending_.front();
    pending_.erase(pending_.begin());
    hooks_.take(first);
    state_[size_t(first)] = where::whole;
    if (first == b) return;
  }
}

void parameter_fetcher::release(int b) {
  if (state_[size_t(b)] == where::absent) return;
  take(b);
  hooks_.release(b);
  state_[size_t(b)] = where::absent;
}

int parameter_fetcher::next_reader(int n, int next, bool past_empty) const {
  if (next < 0) return -1;
  of(next);  // inside the stage
  const int step = next >= n ? 1 : -1, end = first_ + int(node_buckets_.size());
  for (int k = next; k >= first_ && k < end; k += step) {
    const auto& bs = of(k);
    if (bs.empty() && !past_empty) return k;
    for (int b : bs)
      if (!pinned_[size_t(b)]) return k;
  }
  return -1;
}

void parameter_fetcher::before_node(int n, int next) {
  const auto& now = of(n);
  static const std::vector<int> none;
  const int ahead_at = next_reader(n, next, false), reads_at = next_reader(n, next, true);
  const auto& ahead = ahead_at >= 0 ? of(ahead_at) : none;
  const auto& reads = reads_at >= 0 ? of(reads_at) : none;
  auto in = [](const std::vector<int>& v, int b) {
    return std::find(v.begin(), v.end(), b) != v.end();
  };
  auto kept = [&](int b) {
    return held_[size_t(b)] || pinned_[size_t(b)] || (holding_ && fresh_[size_t(b)]) ||
           in(now, b) || in(ahead, b) || in(reads, b);
  };
  for (int b = 0; b < int(state_.size()); ++b)
    if (!kept(b)) release(b);
  for (int b : now) request(b);
  for (int b : ahead) request(b);
  for (int b : now) take(b);
}

void parameter_fetcher::hold(int lo, int hi) {
  std::fill(held_.begin(), held_.end(), 0);
  std::fill(fresh_.begin(), fresh_.end(), 0);
  holding_ = lo < hi;
  for (int n = lo; n < hi; ++n)
    for (int b : of(n)) held_[size_t(b)] = 1;
}

void parameter_fetcher::release_all() {
  for (int b = 0; b < int(state_.size()); ++b) release(b);
}

}  // namespace merak::model
