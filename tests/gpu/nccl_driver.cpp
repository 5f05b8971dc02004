// Tests of the NCCL transport (comm/nccl_transport.hpp) with real processes,
// one per GPU. Skips (exit 77) where the GPUs a scenario needs are missing.
//
//   merak_nccl_tests <scenario> <procs>    launches <procs> workers of itself
//   (worker mode: MERAK_NCCL_WORKER=<scenario> in the environment)
//
// Scenarios
//   no_gpu       (runs only where there is NO GPU; else skips) creating the
//                transport fails at once with "no usable CUDA device".
//   single       1 rank on GPU 0: allreduce sum/avg, OR, reduce-scatter
//                (float, bf16), allgather,
//                broadcast, barrier, send/recv to itself (posted receive
//                first, two messages in order), a host buffer refused with
//                an error naming peer and tag. Needs 1 GPU.
//   collectives  <procs> ranks on GPUs 0..procs-1: the same collectives
//                against a reference computed on the host, equal bits on
//                every rank; a ring exchange of two messages per pair; bytes
//                counted. Needs <procs> GPUs.
//   shared_gpu   2 ranks both on GPU 0: NCCL (>= 2.5) refuses a communicator
//                with two ranks on one GPU; each rank must fail with an error
//                saying "one GPU per rank" within its timeout (exit 42), or,
//                should a NCCL version accept it, compute a correct
//                all-reduce (exit 0). Never hangs. Needs 1 GPU.
//   peer_hangs   2 ranks: rank 1 sleeps instead of taking part; rank 0 must
//                fail with "timed out" within about its 1 s timeout (exit
//                42). Needs 2 GPUs.
//   device_collectives  <procs> ranks: NCCL's device collectives
//                (comm/nccl_collectives.hpp) on CUDA tensors, set up over a
//                UCX host transport as a TP group does: all-reduce (float,
//                bf16), reduce-scatter and all-gather with even and uneven
//                shards, against the host's sums. Needs <procs> GPUs.
//   device_links 2 ranks: the tensor channel (comm/tensor_channel.hpp) over
//                UCX with NCCL's device links (comm/device_links.hpp): each
//                rank sends CUDA tensors to the other at the same time;
//                they arrive on the receiver's GPU, whole and in order.
//                Needs 2 GPUs (NCCL takes one GPU per member).
// The driver exits 0 when the scenario behaved as described, 77 to skip,
// else 1.

#include <cuda_runtime_api.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "../comm/rank_values.hpp"
#include "comm/collectives.hpp"
#include "comm/device_collectives.hpp"
#include "comm/device_links.hpp"
#include "comm/nccl_collectives.hpp"
#include "comm/nccl_transport.hpp"
#include "comm/tensor_channel.hpp"
#include "comm/ucx_transport.hpp"
#include "core/bf16.hpp"
#include "core/error.hpp"
#include "gpu/cuda_backend.hpp"
#include "job/bootstrap.hpp"
#include "job/launcher.hpp"
#include "model/tensor.hpp"

using namespace merak::comm;
using namespace merak::job;
using namespace std::chrono_literals;

namespace {

constexpr int kexpected_failure = 42;
constexpr int kskip = 77;

void require(bool ok, const std::string& what) {
  if (!ok) merak::fail("check failed: {}", what);
}

void cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) merak::fail("{}: {}", what, cudaGetErrorString(e));
}

// A device buffer of T, RAII.
template <typename T>
class dbuf {
 public:
  explicit dbuf(size_t n) : n_(n) {
    cuda(cudaMalloc(reinterpret_cast<void**>(&p_), std::max<size_t>(n, 1) * sizeof(T)),
         "cudaMalloc");
  }
  ~dbuf() { cudaFree(p_); }
  dbuf(const dbuf&) = delete;
  dbuf& operator=(const dbuf&) = delete;
  T* get() const { return p_; }
  void put(const std::vector<T>& h) {
    cuda(cudaMemcpy(p_, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice), "copy to device");
  }
  std::vector<T> take() const {
    std::vector<T> h(n_);
    cuda(cudaMemcpy(h.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost), "copy to host");
    return h;
  }

 private:
  T* p_ = nullptr;
  size_t n_;
};

using merak::comm::testing::fnv;
using merak::comm::testing::value;

// The collectives and a point-to-point ring on every rank of `t`.
void check_collectives(bootstrap& b, nccl_transport& t) {
  const int P = t.size(), r = t.rank();
  for (size_t n : {size_t{1}, size_t{1000}, size_t{12347}, (size_t{1} << 20) + 3}) {
    std::vector<float> h(n);
    for (size_t i = 0; i < n; ++i) h[i] = value(r, i);
    dbuf<float> d(n);
    d.put(h);
    t.allreduce_sum(d.get(), n);
    auto x = d.take();
    for (size_t i = 0; i < n; ++i) {
      double ref = 0, mag = 0;
      for (int k = 0; k < P; ++k) ref += value(k, i), mag += std::abs(value(k, i));
      require(std::abs(x[i] - ref) <= P * 6e-8 * mag + 1e-30,
              fmt::format("allreduce_sum n {} element {}: {} vs {}", n, i, x[i], ref));
    }
    const uint64_t hash = fnv(x.data(), n * 4);
    for (auto& o : b.allgather(std::string(reinterpret_cast<const char*>(&hash), sizeof hash)))
      require(o == std::string(reinterpret_cast<const char*>(&hash), sizeof hash),
              fmt::format("allreduce_sum n {}: ranks hold different bits", n));
    d.put(h);
    t.allreduce_avg(d.get(), n);
    x = d.take();
    for (size_t i = 0; i < n; i += 7) {
      double ref = 0, mag = 0;
      for (int k = 0; k < P; ++k) ref += value(k, i), mag += std::abs(value(k, i));
      require(std::abs(x[i] - ref / P) <= 6e-8 * mag + 1e-30, "allreduce_avg");
    }
  }
  std::vector<uint64_t> bits(77);
  for (size_t i = 0; i < bits.size(); ++i) bits[i] = uint64_t{1} << ((i + r) % 64);
  dbuf<uint64_t> db(bits.size());
  db.put(bits);
  t.allreduce_or(db.get(), bits.size());
  bits = db.take();
  for (size_t i = 0; i < bits.size(); ++i) {
    uint64_t ref = 0;
    for (int k = 0; k < P; ++k) ref |= uint64_t{1} << ((i + k) % 64);
    require(bits[i] == ref, fmt::format("allreduce_or word {}", i));
  }
  {
    // Reduce-scatter: rank r's block k holds value(r, k * cnt + i) in the
    // wire type; block r of the sum arrives at rank r, within `tol` of the
    // sum of what was sent.
    const size_t cnt = 3001;
    auto check = [&](auto wire, auto back, auto call, double tol, const char* what) {
      using W = decltype(wire(0.0f));
      std::vector<W> mine_all(cnt * P);
      for (size_t i = 0; i < mine_all.size(); ++i) mine_all[i] = wire(value(r, i));
      dbuf<W> da(mine_all.size()), dm(cnt);
      da.put(mine_all);
      call(da.get(), dm.get());
      const auto got = dm.take();
      for (size_t i = 0; i < cnt; ++i) {
        double ref = 0, mag = 0;
        for (int k = 0; k < P; ++k) {
          const double v = back(wire(value(k, r * cnt + i)));
          ref += v, mag += std::abs(v);
        }
        require(std::abs(back(got[i]) - ref) <= tol * mag + 1e-30, what);
      }
    };
    check([](float x) { return x; }, [](float x) { return double(x); },
          [&](float* a, float* m) { t.reduce_scatter_sum(a, m, cnt); }, 6e-8, "reduce_scatter_sum");
    check([](float x) { return merak::to_bf16(x).bits; },
          [](uint16_t x) { return double(merak::to_f32(merak::bf16{x})); },
          [&](uint16_t* a, uint16_t* m) { t.reduce_scatter_sum_bf16(a, m, cnt); }, 8e-3,
          "reduce_scatter_sum_bf16");
  }
  const size_t blk = 1001;
  dbuf<unsigned char> mine(blk), all(blk * P);
  mine.put(std::vector<unsigned char>(blk, static_cast<unsigned char>(r + 1)));
  t.allgather(mine.get(), blk, all.get());
  const auto got = all.take();
  for (int k = 0; k < P; ++k)
    for (size_t i = 0; i < blk; ++i) require(got[k * blk + i] == k + 1, "allgather");
  std::vector<int> hb(300001, 0);
  if (r == P - 1)
    for (size_t i = 0; i < hb.size(); ++i) hb[i] = int(i);
  dbuf<int> bb(hb.size());
  bb.put(hb);
  t.broadcast(bb.get(), hb.size() * sizeof(int), P - 1);
  hb = bb.take();
  for (size_t i = 0; i < hb.size(); i += 997) require(hb[i] == int(i), "broadcast");
  t.barrier();

  // Point to point: two messages to the right neighbour (to itself at P = 1),
  // receives posted before the sends; per pair they match in posting order.
  const int right = (r + 1) % P, left = (r + P - 1) % P;
  const size_t n1 = 5000, n2 = 70001;
  std::vector<float> s1(n1), s2(n2);
  for (size_t i = 0; i < n1; ++i) s1[i] = value(r, i);
  for (size_t i = 0; i < n2; ++i) s2[i] = value(r + 100, i);
  dbuf<float> ds1(n1), ds2(n2), dr1(n1), dr2(n2);
  ds1.put(s1), ds2.put(s2);
  t.reset_bytes_sent();
  auto c1 = t.irecv(left, 11, dr1.get(), n1 * 4);
  auto c2 = t.irecv(left, 12, dr2.get(), n2 * 4);
  auto c3 = t.isend(right, 11, ds1.get(), n1 * 4);
  auto c4 = t.isend(right, 12, ds2.get(), n2 * 4);
  c1.wait(), c2.wait(), c3.wait(), c4.wait();
  const auto r1 = dr1.take(), r2 = dr2.take();
  // The first wrong element of each message, with both messages' first
  // values, so that a mismatch tells a swapped match from lost data.
  auto check_message = [&](const std::vector<float>& got, int from, const char* name) {
    for (size_t i = 0; i < got.size(); ++i)
      if (got[i] != value(from, i))
        merak::fail(
            "check failed: send/recv {}: element {} is {}, {} expected (message 1 starts "
            "{} {}, message 2 starts {} {})",
            name, i, got[i], value(from, i), r1[0], r1[1], r2[0], r2[1]);
  };
  check_message(r1, left, "message 1");
  check_message(r2, left + 100, "message 2");
  const uint64_t expect = right == r ? 0 : (n1 + n2) * 4;
  require(t.bytes_sent() == expect, fmt::format("bytes sent {} vs {}", t.bytes_sent(), expect));

  // A host buffer is refused, naming peer and tag.
  std::vector<float> host(16);
  try {
    t.isend(right, 13, host.data(), 64);
    require(false, "a host buffer was accepted");
  } catch (const merak::error& e) {
    const std::string msg = e.what();
    require(msg.find("not device memory") != std::string::npos &&
                msg.find(fmt::format("peer {} tag 13", right)) != std::string::npos,
            "host buffer error: " + msg);
  }
  t.barrier();
}

// NCCL's device collectives on CUDA tensors of rank r (GPU r), set up over a
// host transport, against sums formed from every rank's known inputs.
void check_device_collectives(bootstrap& b, int r) {
  namespace model = merak::model;
  merak::gpu::enable_cuda();
  enable_nccl_collectives();
  auto host = make_ucx_transport(b);
  const int P = host->size();
  const model::device d = model::device::cuda(r);
  auto dc = make_device_collectives(*host, d, 1);
  require(dc && dc->name() == "nccl", "NCCL device collectives made");
  auto device_tensor = [&](size_t n, model::dtype t) {
    model::tensor h({int64_t(n)}, t);
    for (size_t i = 0; i < n; ++i)
      if (t == model::dtype::f32)
        h.f32()[i] = value(r, i);
      else
        h.bf16s()[i] = merak::to_bf16(value(r, i));
    return h.to(d);
  };
  // Element i of a host copy of x, as a float.
  auto element = [](const model::tensor& h, size_t i) {
    return h.type() == model::dtype::f32 ? h.f32()[i] : merak::to_f32(h.bf16s()[i]);
  };
  auto sum_of = [&](size_t i) {
    double ref = 0, mag = 0;
    for (int k = 0; k < P; ++k) ref += value(k, i), mag += std::abs(value(k, i));
    return std::pair{ref, mag};
  };
  for (size_t n : {size_t{12}, size_t{1000}, size_t{12347}}) {
    for (auto t : {model::dtype::f32, model::dtype::bf16}) {
      const double tol = t == model::dtype::f32 ? P * 6e-8 : P * 1.6e-2;
      auto x = device_tensor(n, t);
      dc->allreduce_sum(x);
      auto back = x.to(model::device::cpu());
      for (size_t i = 0; i < n; ++i) {
        auto [ref, mag] = sum_of(i);
        require(std::abs(element(back, i) - ref) <= tol * mag + 1e-30,
                fmt::format("device all-reduce {} n {} element {}: {} vs {}", model::dtype_name(t),
                            n, i, element(back, i), ref));
      }
      auto y = device_tensor(n, t);
      dc->reduce_scatter_sum(y);
      back = y.to(model::device::cpu());
      const auto [lo, hi] = shard_range(n, P, r);
      for (size_t i = lo; i < hi; ++i) {
        auto [ref, mag] = sum_of(i);
        require(std::abs(element(back, i) - ref) <= tol * mag + 1e-30,
                fmt::format("device reduce-scatter {} n {} element {}: {} vs {}",
                            model::dtype_name(t), n, i, element(back, i), ref));
      }
    }
    // All-gather: each rank's shard holds its own values, the rest zeros.
    auto h = model::tensor::zeros({int64_t(n)});
    const auto [lo, hi] = shard_range(n, P, r);
    for (size_t i = lo; i < hi; ++i) h.f32()[i] = value(r, i);
    auto g = h.to(d);
    dc->allgather_shards(g);
    auto back = g.to(model::device::cpu());
    for (int k = 0; k < P; ++k) {
      const auto [a, e] = shard_range(n, P, k);
      for (size_t i = a; i < e; ++i)
        require(back.f32()[i] == value(k, i),
                fmt::format("device all-gather n {} element {} (rank {}'s)", n, i, k));
    }
  }
  b.barrier();
}

// Ranks 0 and 1 exchange CUDA tensors over the tensor channel with NCCL's
// device links: 20 each way at once, checked on the host after arrival.
void check_device_links(bootstrap& b, int r) {
  namespace model = merak::model;
  merak::gpu::enable_cuda();
  enable_nccl_links();
  std::shared_ptr<transport> host = make_ucx_transport(b);
  const model::device d = model::device::cuda(r);
  auto links = make_device_links(*host, {1 - r}, d);
  require(links.size() == 1 && links.begin()->second->name() == "nccl", "an NCCL link made");
  constexpr int kcount = 20;
  std::mutex mu;
  std::vector<model::tensor> got;
  std::string failure;
  tensor_channel ch(
      host,
      [&](int, const tensor_label&, model::tensor x) {
        std::lock_guard lock(mu);
        got.push_back(std::move(x));
      },
      [&](const std::string& what) {
        std::lock_guard lock(mu);
        failure = what;
      },
      std::chrono::microseconds(0), {}, std::move(links));
  for (int i = 0; i < kcount; ++i) {
    model::tensor h({int64_t(1000 + 37 * i)});
    for (int64_t k = 0; k < h.numel(); ++k) h.f32()[k] = value(r, size_t(k)) + float(i);
    ch.send(1 - r, {0, 0, i, 0}, std::make_shared<const model::tensor>(h.to(d)));
  }
  const auto end = std::chrono::steady_clock::now() + 60s;
  for (;;) {
    {
      std::lock_guard lock(mu);
      require(failure.empty(), "channel: " + failure);
      if (int(got.size()) == kcount) break;
    }
    require(std::chrono::steady_clock::now() < end, "device links: tensors missing after 60 s");
    std::this_thread::sleep_for(1ms);
  }
  for (int i = 0; i < kcount; ++i) {
    require(got[size_t(i)].where() == d,
            fmt::format("tensor {} on {}", i, got[size_t(i)].where().str()));
    const auto back = got[size_t(i)].to(model::device::cpu());
    require(back.numel() == 1000 + 37 * i, fmt::format("tensor {}: {} elements", i, back.numel()));
    for (int64_t k = 0; k < back.numel(); ++k)
      require(back.f32()[k] == value(1 - r, size_t(k)) + float(i),
              fmt::format("tensor {} element {}", i, k));
  }
  b.barrier();
}

int worker(const std::string& scenario) {
  bootstrap_options bo;
  bo.timeout = 60000ms;
  const auto opts = resolve_bootstrap(bo);
  const int rank = opts.rank;
  std::shared_ptr<bootstrap> b = connect_bootstrap(opts);
  if (scenario == "device_collectives") {
    check_device_collectives(*b, rank);
    return 0;
  }
  if (scenario == "device_links") {
    check_device_links(*b, rank);
    return 0;
  }
  nccl_options no;
  no.timeout = scenario == "peer_hangs" ? 1000ms : scenario == "shared_gpu" ? 20000ms : 60000ms;
  if (scenario == "shared_gpu") no.device = 0;
  try {
    auto t = make_nccl_transport(b, no);
    if (scenario == "collectives" || scenario == "single") {
      check_collectives(*b, *t);
      b->barrier();
      return 0;
    }
    if (scenario == "shared_gpu") {  // accepted by this NCCL: it must still be right
      dbuf<float> d(1000);
      d.put(std::vector<float>(1000, float(rank + 1)));
      t->allreduce_sum(d.get(), 1000);
      for (float v : d.take()) require(v == 3.0f, "shared GPU all-reduce");
      std::cerr << "rank " << rank << ": this NCCL accepts two ranks on one GPU\n";
      b->barrier();
      return 0;
    }
    if (scenario == "peer_hangs") {
      dbuf<float> d(100000);
      for (int it = 0; it < 1000000; ++it) {
        if (it == 3 && rank == 1) std::this_thread::sleep_for(60s);
        const auto t0 = std::chrono::steady_clock::now();
        try {
          t->allreduce_sum(d.get(), 100000);
        } catch (const std::exception& e) {
          const double s =
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
          std::cerr << "[expected? rank " << rank << " after " << s << " s] " << e.what() << "\n";
          const std::string msg = e.what();
          return msg.find("timed out") != std::string::npos && s < 5.0 ? kexpected_failure : 1;
        }
      }
      return 1;
    }
    std::cerr << "unknown scenario " << scenario << "\n";
    return 1;
  } catch (const std::exception& e) {
    const std::string msg = e.what();
    std::cerr << "[expected? rank " << rank << "] " << msg << "\n";
    if (scenario == "shared_gpu" && msg.find("one GPU per rank") != std::string::npos)
      return kexpected_failure;
    return 1;
  }
}

int no_gpu() {
  bootstrap_options bo;
  bo.rank = 0, bo.world_size = 1;
  std::shared_ptr<bootstrap> b = connect_bootstrap(resolve_bootstrap(bo));
  try {
    auto t = make_nccl_transport(b);
    std::cerr << "a transport was made without a GPU\n";
    return 1;
  } catch (const merak::error& e) {
    const std::string msg = e.what();
    std::cout << "expected error: " << msg << "\n";
    return msg.find("rank 0") != std::string::npos &&
                   msg.find("no usable CUDA device") != std::string::npos
               ? 0
               : 1;
  }
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (const char* s = std::getenv("MERAK_NCCL_WORKER")) return worker(s);
    if (argc != 3) {
      std::cerr
          << "usage: " << argv[0]
          << " no_gpu|single|collectives|shared_gpu|peer_hangs|device_collectives|device_links "
             "<procs>\n";
      return 2;
    }
    const std::string scenario = argv[1];
    const int procs = std::atoi(argv[2]);
    const int gpus = nccl_device_count();
    std::cout << "NCCL " << nccl_version() << ", " << gpus << " GPU(s)"
              << (gpus ? "" : " (" + nccl_unavailable_reason() + ")") << "\n";
    if (scenario == "no_gpu") {
      if (gpus > 0) return std::cout << "skipped: a GPU is present\n", kskip;
      return no_gpu();
    }
    const int need = scenario == "shared_gpu" || scenario == "single" ? 1 : procs;
    if (gpus < need) {
      std::cout << "skipped: scenario " << scenario << " needs " << need << " GPU(s), found "
                << gpus << "\n";
      return kskip;
    }
    launch_options lo;
    lo.procs = scenario == "single" ? 1 : scenario == "shared_gpu" ? 2 : procs;
    lo.argv = {self_executable()};
    lo.env["MERAK_NCCL_WORKER"] = scenario == "single" ? "collectives" : scenario;
    lo.grace = 30000ms;
    if (scenario == "peer_hangs") lo.grace = 8000ms;
    lo.timeout = 120000ms;
    const auto t0 = std::chrono::steady_clock::now();
    auto res = launch_local(lo);
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::cout << scenario << " with " << lo.procs
              << " processes: " << (res.ok() ? "all ranks succeeded" : res.message) << " (" << secs
              << " s)\n";
    bool pass = false;
    if (scenario == "single" || scenario == "collectives" || scenario == "device_collectives" ||
        scenario == "device_links") {
      pass = res.ok();
    } else if (scenario == "shared_gpu") {
      pass = res.ok();
      if (!pass) {
        pass = true;
        for (int r = 0; r < lo.procs; ++r)
          pass = pass && (res.exit_code[r] == kexpected_failure || res.signal[r] == SIGKILL);
        pass = pass &&
               (res.exit_code[0] == kexpected_failure || res.exit_code[1] == kexpected_failure);
      }
    } else if (scenario == "peer_hangs") {
      pass = res.exit_code[0] == kexpected_failure;
    }
    for (int r = 0; r < lo.procs; ++r)
      std::cout << "  rank " << r << ": exit " << res.exit_code[r] << " signal " << res.signal[r]
                << "\n";
    std::cout << (pass ? "PASS" : "FAIL") << "\n";
    return pass ? 0 : 1;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}
