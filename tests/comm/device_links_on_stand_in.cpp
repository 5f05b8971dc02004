// The tensor channel's device links (comm/device_links.hpp) on the stand-in
// device, with the stand-in links (tests/comm/stand_in_links.hpp) where
// NCCL's would run on GPUs: a pipeline's activations one way and gradients
// the other, at the same time, arrive on the receiver's device whole and
// in order per pair; a device tensor to a peer without a link arrives on
// the host; with the links turned off every device tensor does; a device
// payload for a channel that lacks the link fails there, naming the peer.
#include <catch2/catch.hpp>

#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <vector>

#include "comm/inproc.hpp"
#include "comm/tensor_channel.hpp"
#include "tests/comm/stand_in_links.hpp"

using namespace merak;
using namespace merak::comm;

namespace {

struct got {
  int peer;
  tensor_label label;
  model::tensor x;
};

// A device tensor of `n` floats base, base + 1, ...
std::shared_ptr<const model::tensor> on_device(int64_t n, float base) {
  model::tensor h({n});
  for (int64_t i = 0; i < n; ++i) h.f32()[i] = base + float(i);
  return std::make_shared<const model::tensor>(h.to(model::device::cuda(0)));
}

// Three processes' channels (in-process), ranks 0 - 1 - 2 a pipeline's
// neighbours with links between neighbours; every tensor each received.
struct three_channels {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::vector<got>> inbox{3};
  std::string failure;
  std::vector<std::unique_ptr<tensor_channel>> ch;

  three_channels() {
    auto group = make_inproc_group(3, std::chrono::milliseconds(10000));
    // The links' set-up is collective between neighbours: each rank's own
    // thread, as each process would.
    std::vector<channel_links> links(3);
    const std::vector<std::vector<int>> peers = {{1}, {0, 2}, {1}};
    std::vector<std::thread> makers;
    for (int r = 0; r < 3; ++r)
      makers.emplace_back([&, r] {
        links[size_t(r)] =
            make_device_links(*group[size_t(r)], peers[size_t(r)], model::device::cuda(0));
      });
    for (auto& m : makers) m.join();
    for (int r = 0; r < 3; ++r)
      ch.push_back(std::make_unique<tensor_channel>(
          std::shared_ptr<transport>(std::move(group[size_t(r)])),
          [this, r](int peer, const tensor_label& l, model::tensor x) {
            std::lock_guard lock(mu);
            inbox[size_t(r)].push_back({peer, l, std::move(x)});
            cv.notify_all();
          },
          [this](const std::string& what) {
            std::lock_guard lock(mu);
            failure = what;
            cv.notify_all();
          },
          std::chrono::microseconds(0), channel_rings{}, std::move(links[size_t(r)])));
  }

  // Waits until rank r holds n tensors (or a channel failed).
  void wait_for(int r, size_t n) {
    std::unique_lock lock(mu);
    REQUIRE(cv.wait_for(lock, std::chrono::seconds(20),
                        [&] { return !failure.empty() || inbox[size_t(r)].size() >= n; }));
    REQUIRE(failure.empty());
  }
};

// Rank 0 sends activations to rank 1 while rank 1 sends gradients back;
// rank 0 also sends one device tensor to rank 2, with which it has no link.
void exchange(three_channels& c, int per_way) {
  std::thread forward([&] {
    for (int i = 0; i < per_way; ++i)
      c.ch[0]->send(1, {1, 0, i, 10}, on_device(64 + i, 1000.f * i));
  });
  std::thread backward([&] {
    for (int i = 0; i < per_way; ++i)
      c.ch[1]->send(0, {0, 1, i, 20}, on_device(32 + i, -500.f * i));
  });
  forward.join();
  backward.join();
  c.ch[0]->send(2, {2, 0, 0, 30}, on_device(5, 7.f));
  c.wait_for(1, size_t(per_way));
  c.wait_for(0, size_t(per_way));
  c.wait_for(2, 1);
}

// The tensor as host floats.
std::vector<float> host_floats(const model::tensor& x) {
  const model::tensor h = x.to(model::device::cpu());
  return {h.f32(), h.f32() + h.numel()};
}

}  // namespace

TEST_CASE("device tensors cross the channel over device links, both ways at once",
          "[device][channel]") {
  const long before = test::stand_in_link_sends();
  three_channels c;
  const int per_way = 40;
  exchange(c, per_way);
  // Each pair's tensors in order, on the receiver's device, whole.
  for (int r : {0, 1}) {
    auto& in = c.inbox[size_t(r)];
    REQUIRE(in.size() == size_t(per_way));
    for (int i = 0; i < per_way; ++i) {
      const auto& g = in[size_t(i)];
      INFO("rank " << r << " message " << i);
      CHECK(g.peer == 1 - r);
      CHECK(g.label.mb == i);
      CHECK(g.x.where() == model::device::cuda(0));
      const auto v = host_floats(g.x);
      REQUIRE(v.size() == size_t((r == 1 ? 64 : 32) + i));
      const float base = r == 1 ? 1000.f * i : -500.f * i;
      CHECK(v.front() == base);
      CHECK(v.back() == base + float(v.size() - 1));
    }
  }
  // No link between 0 and 2: a host copy, arriving on the host.
  REQUIRE(c.inbox[2].size() == 1);
  CHECK(c.inbox[2][0].x.where() == model::device::cpu());
  CHECK(host_floats(c.inbox[2][0].x) == std::vector<float>{7, 8, 9, 10, 11});
  CHECK(test::stand_in_link_sends() - before == 2 * per_way);
}

TEST_CASE("with device collectives turned off the channel copies device tensors to the host",
          "[device][channel]") {
  ::setenv("MERAK_DEVICE_COLLECTIVES", "0", 1);
  const long before = test::stand_in_link_sends();
  try {
    three_channels c;
    exchange(c, 3);
    for (auto& in : c.inbox)
      for (auto& g : in) CHECK(g.x.where() == model::device::cpu());
  } catch (...) {
    ::unsetenv("MERAK_DEVICE_COLLECTIVES");
    throw;
  }
  ::unsetenv("MERAK_DEVICE_COLLECTIVES");
  CHECK(test::stand_in_link_sends() == before);
}

TEST_CASE("a device payload for a channel without that link fails naming the peer",
          "[device][channel]") {
  auto group = make_inproc_group(2, std::chrono::milliseconds(10000));
  std::vector<channel_links> links(2);
  std::thread other([&] { links[1] = make_device_links(*group[1], {0}, model::device::cuda(0)); });
  links[0] = make_device_links(*group[0], {1}, model::device::cuda(0));
  other.join();
  REQUIRE(links[0].size() == 1);
  links[1].clear();  // rank 1's channel is made without its end of the link
  std::mutex mu;
  std::condition_variable cv;
  std::string failure;
  std::vector<std::unique_ptr<tensor_channel>> ch;
  for (int r = 0; r < 2; ++r)
    ch.push_back(std::make_unique<tensor_channel>(
        std::shared_ptr<transport>(std::move(group[size_t(r)])),
        [](int, const tensor_label&, model::tensor) {},
        [&](const std::string& what) {
          std::lock_guard lock(mu);
          failure = what;
          cv.notify_all();
        },
        std::chrono::microseconds(0), channel_rings{}, std::move(links[size_t(r)])));
  ch[0]->send(1, {0, 0, 0, 0}, on_device(8, 1.f));
  std::unique_lock lock(mu);
  REQUIRE(cv.wait_for(lock, std::chrono::seconds(20), [&] { return !failure.empty(); }));
  CHECK_THAT(failure, Catch::Contains("tensor channel rank 1: peer 0 sent message 1 over a device "
                                      "link this process does not have with it"));
}
