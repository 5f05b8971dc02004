#include "bench/p2p_bench.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>

#include "actors/idle_wait.hpp"
#include "bench/worker_launch.hpp"
#include "comm/tensor_channel.hpp"
#include "job/bootstrap.hpp"
#include "job/launcher.hpp"
#ifdef MERAK_WITH_UCX
#include "comm/ucx_transport.hpp"
#endif
#include "core/error.hpp"

namespace merak::bench {
namespace {

using clock_type = std::chrono::steady_clock;

double median_us(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// Round trips of `bytes` over the raw transport (rank 0 starts), each
// side sending from the next of `buffers` buffers in turn.
std::vector<double> raw_round_trips(comm::transport& t, int64_t bytes, int buffers, int n) {
  std::vector<std::vector<char>> bufs(size_t(buffers), std::vector<char>(size_t(bytes), 1));
  std::vector<double> rt;
  const int peer = 1 - t.rank();
  for (int i = 0; i < n; ++i) {
    auto& buf = bufs[size_t(i % buffers)];
    auto t0 = clock_type::now();
    if (t.rank() == 0) {
      t.isend(peer, 5, buf.data(), buf.size()).wait();
      t.irecv(peer, 6, buf.data(), buf.size()).wait();
    } else {
      t.irecv(peer, 5, buf.data(), buf.size()).wait();
      t.isend(peer, 6, buf.data(), buf.size()).wait();
    }
    rt.push_back(std::chrono::duration<double, std::micro>(clock_type::now() - t0).count());
  }
  return rt;
}

// One tensor channel and what it received.
struct channel_side {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<model::tensor> inbox;
  std::string failure;
  std::unique_ptr<comm::tensor_channel> ch;  // last: its thread stops before the inbox goes

  channel_side(std::shared_ptr<comm::transport> t, std::chrono::microseconds spin,
               comm::channel_rings rings) {
    ch = std::make_unique<comm::tensor_channel>(
        std::move(t),
        [this](int, const comm::tensor_label&, model::tensor x) {
          std::lock_guard lock(mu);
          inbox.push_back(std::move(x));
          cv.notify_all();
        },
        [this](const std::string& what) {
          std::lock_guard lock(mu);
          failure = what;
          cv.notify_all();
        },
        spin, std::move(rings));
  }

  model::tensor take() {
    std::unique_lock lock(mu);
    if (!cv.wait_for(lock, std::chrono::seconds(30),
                     [&] { return !inbox.empty() || !failure.empty(); }))
      fail("bench p2p: no tensor within 30 s");
    if (!failure.empty()) fail("bench p2p: {}", failure);
    auto t = std::move(inbox.back());
    inbox.pop_back();
    return t;
  }
};

// Round trips of a tensor of `bytes` through a tensor channel: rank 0
// sends the next of `buffers` tensors in turn (as a stage sends a new
// activation every micro-batch), rank 1 sends back what it received.
std::vector<double> channel_round_trips(channel_side& side, int64_t bytes, int buffers, int n) {
  std::vector<std::shared_ptr<model::tensor>> xs;
  for (int k = 0; k < buffers; ++k) {
    xs.push_back(std::make_shared<model::tensor>(model::shape_t{bytes / 4}));
    xs.back()->fill_zero();
  }
  std::vector<double> rt;
  auto& ch = *side.ch;
  const int peer = 1 - ch.rank();
  for (int i = 0; i < n; ++i) {
    auto t0 = clock_type::now();
    if (ch.rank() == 0) {
      ch.send(peer, {0, 0, i, 0}, xs[size_t(i % buffers)]);
      side.take();
    } else {
      auto got = std::make_shared<model::tensor>(side.take());
      ch.send(peer, {0, 0, i, 0}, got);
    }
    rt.push_back(std::chrono::duration<double, std::micro>(clock_type::now() - t0).count());
  }
  return rt;
}

nlohmann::json run_worker(const p2p_bench_options& options) {
#ifdef MERAK_WITH_UCX
  job::bootstrap_options bo;
  bo.timeout = std::chrono::seconds(options.timeout_s);
  std::shared_ptr<job::bootstrap> b = job::connect_bootstrap(job::resolve_bootstrap(bo));
  if (b->size() != 2) fail("bench p2p: needs exactly 2 processes (got {})", b->size());
  comm::ucx_options uo;
  uo.timeout = std::chrono::seconds(options.timeout_s);
  auto raw = comm::make_ucx_transport(b, uo);
  const auto spin = actors::spin_budget(options.spin_us, 2);  // the two channel threads
  // As in training: the channel's own UCX transport, and for each size a
  // ring between the two processes (the local launcher starts both on this
  // host) with room for four tensors.
  const uint64_t job = std::stoull(b->allgather(fmt::format(
      "{}",
      uint64_t(::getpid()) << 32 ^ uint64_t(clock_type::now().time_since_epoch().count())))[0]);
  channel_side plain(comm::make_ucx_transport(b, uo), spin, {});
  nlohmann::json rows = nlohmann::json::array();
  for (int64_t bytes : options.bytes) {
    if (bytes < 4 || bytes % 4)
      fail("bench p2p: --bytes {} is not a positive multiple of 4", bytes);
    raw_round_trips(*raw, bytes, options.buffers, options.warmup);
    auto r = raw_round_trips(*raw, bytes, options.buffers, options.iters);
    b->barrier();
    channel_side ringed(
        comm::make_ucx_transport(b, uo), spin,
        comm::make_host_rings(*b, {1 - b->rank()}, size_t(4 * bytes), job + uint64_t(bytes)));
    channel_round_trips(ringed, bytes, options.buffers, options.warmup);
    auto c = channel_round_trips(ringed, bytes, options.buffers, options.iters);
    b->barrier();
    channel_round_trips(plain, bytes, options.buffers, options.warmup);
    auto u = channel_round_trips(plain, bytes, options.buffers, options.iters);
    b->barrier();
    const double raw_us = median_us(r) / 2, ch_us = median_us(c) / 2, plain_us = median_us(u) / 2;
    rows.push_back({{"bytes", bytes},
                    {"ucx_one_way_us", raw_us},
                    {"channel_one_way_us", ch_us},
                    {"channel_vs_ucx", ch_us / raw_us},
                    {"channel_without_ring_one_way_us", plain_us},
                    {"ucx_gb_per_s", double(bytes) / raw_us * 1e-3},
                    {"channel_gb_per_s", double(bytes) / ch_us * 1e-3}});
  }
  b->barrier();
  if (b->rank() != 0) return nullptr;
  nlohmann::json j = {{"bench", "p2p"},
                      {"iters", options.iters},
                      {"buffers", options.buffers},
                      {"channel_spin_us", spin.count()},
                      {"ucx_setting", comm::ucx_setting_of(*raw)},
                      {"what",
                       "one-way time of a tensor between 2 processes: UCX tagged "
                       "send/receive against the runtime's tensor channel (through the "
                       "processes' shared ring on one host, and without it)"},
                      {"sizes", rows}};
  if (const char* out = std::getenv("MERAK_BENCH_OUT")) {
    std::ofstream f(out);
    f << j.dump() << "\n";
    return nullptr;
  }
  return j;
#else
  fail("bench p2p: this build has no UCX transport (MERAK_WITH_UCX)");
#endif
}

}  // namespace

nlohmann::json run_p2p_bench(const p2p_bench_options& options) {
  if (options.iters < 1 || options.warmup < 0) fail("bench p2p: --iters must be at least 1");
  if (options.buffers < 1)
    fail("bench p2p: --buffers must be at least 1 (got {})", options.buffers);
  if (options.spin_us < -1)
    fail("bench p2p: --spin-us must be -1 (automatic) or at least 0 (got {})", options.spin_us);
  if (std::getenv("MERAK_BENCH_WORKER")) return run_worker(options);
  job::launch_options lo;
  lo.procs = 2;
  lo.argv = own_argv("bench p2p");
  lo.env["MERAK_BENCH_WORKER"] = "1";
  lo.timeout = std::chrono::seconds(options.timeout_s);
  return launch_for_result(std::move(lo), "bench p2p");
}

}  // namespace merak::bench
