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
      fresh_(state_.size(), 0) {
  for (auto& bs : node_buckets_)
    for (int b : bs)
      MERAK_CHECK(b >= 0 && b < buckets, "parameter fetcher: bucket {} of {}", b, buckets);
}

const std::vector<int>& parameter_fetcher::of(int n) const {
  MERAK_CHECK(n >= first_ && n - first_ < int(node_buckets_.size()),
              "parameter fetcher: node {} outside [{}, {})", n, first_,
              first_ + int(node_buckets_.size()));
  return node_buckets_[size_t(n - first_)];
}

int parameter_fetcher::held() const {
  return int(std::count_if(state_.begin(), state_.end(),
                           [](where w) { return w != where::absent; }));
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

void parameter_fetcher::before_node(int n, int next) {
  const auto& now = of(n);
  static const std::vector<int> none;
  const auto& ahead = next >= 0 ? of(next) : none;
  auto kept = [&](int b) {
    return held_[size_t(b)] || (holding_ && fresh_[size_t(b)]) ||
           std::find(now.begin(), now.end(), b) != now.end() ||
           std::find(ahead.begin(), ahead.end(), b) != ahead.end();
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
