// The device all-gather of a bf16 run's updated values
// (comm::allgather_shards_bf16 over device collectives) on the stand-in
// device and collectives, against the host's allgather_shards_bf16: the
// same values bit for bit, for 1 to 4 members, uneven shards, and exact
// ranges inside, across and covering shards; one collective without exact
// ranges, two with.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <stdexcept>
#include <thread>
#include <vector>

#include "comm/collectives.hpp"
#include "comm/device_collectives.hpp"
#include "comm/inproc.hpp"
#include "tests/comm/stand_in_collectives.hpp"

using namespace merak;
using namespace merak::comm;

namespace {

// Values that bf16 does not hold exactly (ties included, and both signs).
float value(int owner, size_t i) {
  return float(owner + 1) * 1.001f + float(i) * 0.3333f * (i % 2 ? -1.0f : 1.0f) +
         (i % 7 == 0 ? std::ldexp(1.0f, -9) : 0.0f);
}

using range = std::pair<size_t, size_t>;

// Each member's tensor after the gather, on the host (device: through the
// device collectives on cuda:0; else the host collective).
std::vector<std::vector<float>> gathered(int P, size_t n, const std::vector<range>& exact,
                                         bool device) {
  auto group = make_inproc_group(P, std::chrono::milliseconds(20000));
  std::vector<std::vector<float>> out(static_cast<size_t>(P));
  std::vector<std::string> errors(static_cast<size_t>(P));
  std::vector<std::thread> members;
  for (int r = 0; r < P; ++r)
    members.emplace_back([&, r] {
      try {
        auto& t = *group[size_t(r)];
        std::vector<float> x(n, -1.0f);
        auto [b, e] = shard_range(n, P, r);
        for (size_t i = b; i < e; ++i) x[i] = value(r, i);
        if (device) {
          auto dc = make_device_collectives(t, model::device::cuda(0), 31);
          if (!dc) throw std::runtime_error("no device collectives for cuda:0");
          model::tensor h({int64_t(n)});
          std::copy(x.begin(), x.end(), h.f32());
          model::tensor d = h.to(model::device::cuda(0));
          allgather_shards_bf16(*dc, t, d, exact);
          model::tensor back = d.to(model::device::cpu());
          x.assign(back.f32(), back.f32() + n);
        } else {
          allgather_shards_bf16(t, x, exact, 32);
        }
        out[size_t(r)] = std::move(x);
      } catch (const std::exception& e) {
        errors[size_t(r)] = e.what();
      }
    });
  for (auto& m : members) m.join();
  for (auto& e : errors) REQUIRE(e == "");
  return out;
}

}  // namespace

TEST_CASE("bf16 all-gathers of a device bucket equal the host's bit for bit",
          "[comm][device][sharded]") {
  for (int P = 1; P <= 4; ++P)
    for (size_t n : {size_t(1), size_t(P + 1), size_t(1001)}) {
      std::vector<std::vector<range>> layouts = {{}, {{0, n}}};
      if (n > 10) {
        const size_t edge = P > 1 ? shard_range(n, P, 0).second : n / 3;
        layouts.push_back({{0, 3}, {edge - 1, edge + 2}, {n / 2 + 5, n / 2 + 6}, {n - 4, n}});
      }
      for (auto& exact : layouts) {
        INFO("P " << P << " n " << n << " exact ranges " << exact.size());
        const long before = test::stand_in_allgathers();
        const auto on_device = gathered(P, n, exact, true);
        const long calls = test::stand_in_allgathers() - before;
        const auto on_host = gathered(P, n, exact, false);
        for (int r = 0; r < P; ++r)
          for (size_t i = 0; i < n; ++i) {
            INFO("member " << r << " element " << i);
            REQUIRE(std::memcmp(&on_device[size_t(r)][i], &on_host[size_t(r)][i], 4) == 0);
          }
        // Per member: the bf16 bucket, and the floats when a range exists.
        CHECK(calls == (P == 1 ? 0 : P * (exact.empty() ? 1 : 2)));
      }
    }
  // Ranges out of order are refused before any traffic.
  auto group = make_inproc_group(1, std::chrono::milliseconds(1000));
  auto dc = make_device_collectives(*group[0], model::device::cuda(0), 33);
  model::tensor d = model::tensor({10}).to(model::device::cuda(0));
  std::vector<range> bad = {{4, 6}, {2, 3}};
  CHECK_THROWS_WITH(allgather_shards_bf16(*dc, *group[0], d, bad), Catch::Contains("not sorted"));
}
