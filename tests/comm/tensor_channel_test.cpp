#include <catch2/catch.hpp>

#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "comm/inproc.hpp"
#include "comm/tensor_channel.hpp"

using namespace merak;
using namespace merak::comm;

namespace {

// A channel's failure callback that stores the reason and wakes the test.
tensor_channel::fail_fn record_failure(std::mutex& mu, std::condition_variable& cv,
                                       std::string& failure) {
  return [&](const std::string& what) {
    std::lock_guard lock(mu);
    failure = what;
    cv.notify_all();
  };
}

}  // namespace

TEST_CASE("tensors cross a channel whole, labelled, in order per pair", "[channel]") {
  // Sleeping between events, and polling after traffic.
  const int spin_us = GENERATE(0, 200);
  auto group = make_inproc_group(3, std::chrono::milliseconds(10000));
  struct got {
    int peer;
    tensor_label label;
    model::tensor x;
  };
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::vector<got>> inbox(3);
  std::vector<std::unique_ptr<tensor_channel>> ch;
  std::string failure;
  for (int r = 0; r < 3; ++r)
    ch.push_back(std::make_unique<tensor_channel>(
        std::shared_ptr<transport>(std::move(group[size_t(r)])),
        [&, r](int peer, const tensor_label& l, model::tensor x) {
          std::lock_guard lock(mu);
          inbox[size_t(r)].push_back({peer, l, std::move(x)});
          cv.notify_all();
        },
        record_failure(mu, cv, failure), std::chrono::microseconds(spin_us)));
  auto make = [](model::shape_t shape, float base) {
    auto x = std::make_shared<model::tensor>(shape);
    for (int64_t i = 0; i < x->numel(); ++i) x->f32()[i] = base + float(i);
    return x;
  };
  // Rank 0 sends three tensors of different shapes to rank 2, rank 1 one.
  ch[0]->send(2, {7, 0, 0, 11}, make({2, 3, 4}, 100));
  ch[0]->send(2, {7, 1, 1, 12}, make({5}, 200));
  ch[1]->send(2, {8, 0, 3, 13}, make({1, 1}, 300));
  ch[0]->send(2, {9, 0, 2, 14}, make({4, 6}, 400));
  auto ids = std::make_shared<model::tensor>(model::shape_t{2, 2}, model::dtype::i32);
  for (int i = 0; i < 4; ++i) ids->data<int32_t>()[i] = 40 + i;
  ch[2]->send(0, {1, 2, 0, 15}, ids);
  {
    std::unique_lock lock(mu);
    REQUIRE(cv.wait_for(lock, std::chrono::seconds(10), [&] {
      return !failure.empty() || (inbox[2].size() == 4 && inbox[0].size() == 1);
    }));
  }
  REQUIRE(failure.empty());
  std::vector<got> from0;
  for (auto& g : inbox[2])
    if (g.peer == 0) from0.push_back(std::move(g));
  REQUIRE(from0.size() == 3);
  CHECK(from0[0].label.dst == 7);
  CHECK(from0[0].label.value == 11);
  CHECK(from0[0].x.shape() == model::shape_t{2, 3, 4});
  CHECK(from0[0].x.f32()[23] == 123.0f);
  CHECK(from0[1].label.kind == 1);
  CHECK(from0[1].label.mb == 1);
  CHECK(from0[1].x.f32()[4] == 204.0f);
  CHECK(from0[2].label.dst == 9);
  CHECK(from0[2].x.shape() == model::shape_t{4, 6});
  CHECK(inbox[0][0].peer == 2);
  CHECK(inbox[0][0].x.type() == model::dtype::i32);
  CHECK(inbox[0][0].x.data<int32_t>()[3] == 43);
  CHECK(inbox[0][0].label.value == 15);
}

TEST_CASE("a pair's tensors keep their order while senders race the channel's thread",
          "[channel]") {
  // Two threads of rank 0 send in bursts and pauses, so that some tensors
  // are posted by their sender (the channel's thread asleep) and some are
  // queued for the thread (the thread busy): each thread's tensors must
  // still arrive in the order it sent them.
  const int spin_us = GENERATE(0, 200);
  auto group = make_inproc_group(2, std::chrono::milliseconds(10000));
  constexpr int kper_thread = 150;
  std::mutex mu;
  std::condition_variable cv;
  std::vector<tensor_label> got;
  std::string failure;
  std::vector<std::unique_ptr<tensor_channel>> ch;
  for (int r = 0; r < 2; ++r)
    ch.push_back(std::make_unique<tensor_channel>(
        std::shared_ptr<transport>(std::move(group[size_t(r)])),
        [&](int, const tensor_label& l, model::tensor x) {
          std::lock_guard lock(mu);
          if (x.numel() != 1 + l.value % 7 || x.f32()[0] != float(l.value))
            failure = "a tensor arrived with another tensor's contents";
          got.push_back(l);
          cv.notify_all();
        },
        record_failure(mu, cv, failure), std::chrono::microseconds(spin_us)));
  std::vector<std::thread> senders;
  for (int k = 0; k < 2; ++k)
    senders.emplace_back([&, k] {
      for (int i = 0; i < kper_thread; ++i) {
        auto x = std::make_shared<model::tensor>(model::shape_t{1 + i % 7});
        x->fill_zero();
        x->f32()[0] = float(i);
        ch[0]->send(1, {k, 0, 0, i}, std::move(x));
        if (i % 10 == 9) std::this_thread::sleep_for(std::chrono::microseconds(300 * (k + 1)));
      }
    });
  for (auto& t : senders) t.join();
  {
    std::unique_lock lock(mu);
    REQUIRE(cv.wait_for(lock, std::chrono::seconds(20),
                        [&] { return !failure.empty() || got.size() == size_t(2 * kper_thread); }));
  }
  REQUIRE(failure.empty());
  std::vector<int> next(2, 0);
  for (const auto& l : got) {
    REQUIRE(l.dst >= 0);
    REQUIRE(l.dst < 2);
    REQUIRE(l.value == next[size_t(l.dst)]);
    ++next[size_t(l.dst)];
  }
}

TEST_CASE("tensors between peers that share a ring go through it, the rest as payloads",
          "[channel]") {
  auto group = make_inproc_group(2, std::chrono::milliseconds(10000));
  std::vector<std::shared_ptr<transport>> ts;
  for (auto& g : group) ts.emplace_back(std::move(g));
  constexpr size_t kcapacity = 64 << 10;
  std::vector<channel_rings> rings(2);
  for (int from = 0; from < 2; ++from) {
    const size_t n = host_ring::region_bytes(kcapacity);
    std::shared_ptr<void> mem(std::aligned_alloc(host_ring::kalign, n), std::free);
    std::memset(mem.get(), 0, n);
    rings[size_t(from)].to[1 - from] = std::make_shared<host_ring>(mem.get(), kcapacity, mem);
    rings[size_t(1 - from)].from[from] = std::make_shared<host_ring>(mem.get(), kcapacity, mem);
  }
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::pair<tensor_label, model::tensor>> got;
  std::string failure;
  std::vector<std::unique_ptr<tensor_channel>> ch;
  for (int r = 0; r < 2; ++r)
    ch.push_back(std::make_unique<tensor_channel>(
        ts[size_t(r)],
        [&](int, const tensor_label& l, model::tensor x) {
          std::lock_guard lock(mu);
          got.emplace_back(l, std::move(x));
          cv.notify_all();
        },
        record_failure(mu, cv, failure), std::chrono::microseconds(0), rings[size_t(r)]));
  auto make = [](int64_t n, int v) {
    auto x = std::make_shared<model::tensor>(model::shape_t{n});
    for (int64_t i = 0; i < n; ++i) x->f32()[i] = float(v * 100000 + i);
    return x;
  };
  auto await = [&](size_t n) {
    std::unique_lock lock(mu);
    REQUIRE(cv.wait_for(lock, std::chrono::seconds(20),
                        [&] { return !failure.empty() || got.size() >= n; }));
    REQUIRE(failure.empty());
  };
  auto check = [](const std::pair<tensor_label, model::tensor>& g, int64_t n) {
    REQUIRE(g.second.numel() == n);
    for (int64_t i : {int64_t{0}, n / 2, n - 1})
      REQUIRE(g.second.f32()[i] == float(g.first.value * 100000 + i));
  };
  // One at a time: the ring always has room for what fits in it; only the
  // tensor larger than the ring crosses the transport as a payload.
  const std::vector<int64_t> sizes = {1, 250, 4096, 16384, 30000, 4096};
  const uint64_t before = ts[0]->bytes_sent();
  for (size_t i = 0; i < sizes.size(); ++i) {
    ch[0]->send(1, {0, 0, 0, int(i)}, make(sizes[i], int(i)));
    await(i + 1);
    check(got[i], sizes[i]);
  }
  CHECK(ts[0]->bytes_sent() - before == sizes.size() * 96 + 30000 * 4);
  // A burst larger than the ring: what finds no room goes as a payload.
  got.clear();
  for (int i = 0; i < 40; ++i) ch[1]->send(0, {0, 0, 0, i}, make(1000 + 37 * i, i));
  await(40);
  for (auto& g : got) check(g, 1000 + 37 * g.first.value);
}
