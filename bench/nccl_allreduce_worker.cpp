// merak_nccl_allreduce: NCCL's ncclAllReduce (through comm's NCCL transport)
// on the buffers of `merak bench allreduce`, in GPU memory, one process per
// GPU. `merak bench allreduce --method nccl` starts --procs copies of it with
// its local launcher (RANK, WORLD_SIZE, MASTER_PORT, ... in the environment);
// rank 0 writes one JSON object with the fields of the other methods to
// MERAK_BENCH_OUT (or stdout). Kept out of merak so that merak itself never
// needs CUDA.
//
//   merak_nccl_allreduce --rows n --cols d --iters K [--row-density x]
//                        [--seed s] [--timeout-s t]
//
// Each iteration: restore the gradient on the device (untimed), a barrier,
// then time allreduce_avg (ncclAllReduce with ncclAvg, in place, waited on):
// comm_ms = time_ms, decode_ms = 0 (the 1/P is folded into ncclAvg),
// encode_ms = 0. bytes_per_rank is the ring formula (bytes_counted = false):
// NCCL does not report what its collectives move. rel_error is against the
// exact average, computed in double on the host from every rank's gradient.

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "job/bootstrap.hpp"
#include "bench/codec_bench.hpp"
#include "comm/nccl_transport.hpp"
#include "core/error.hpp"

using merak::bench::median;

namespace {

void cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) merak::fail("merak_nccl_allreduce: {}: {}", what, cudaGetErrorString(e));
}

struct device_floats {
  explicit device_floats(size_t n) {
    cuda(cudaMalloc(reinterpret_cast<void**>(&p), n * sizeof(float)), "cudaMalloc");
  }
  ~device_floats() { cudaFree(p); }
  device_floats(const device_floats&) = delete;
  device_floats& operator=(const device_floats&) = delete;
  float* p = nullptr;
};

int run(int argc, char** argv) {
  int64_t n = 4096, d = 1024;
  int iters = 10, timeout_s = 300;
  double density = 1.0;
  uint64_t seed = 1;
  for (int i = 1; i < argc; i += 2) {
    const std::string k = argv[i];
    if (i + 1 >= argc) merak::fail("merak_nccl_allreduce: flag {} needs a value", k);
    const std::string v = argv[i + 1];
    if (k == "--rows")
      n = std::atoll(v.c_str());
    else if (k == "--cols")
      d = std::atoll(v.c_str());
    else if (k == "--iters")
      iters = std::atoi(v.c_str());
    else if (k == "--row-density")
      density = std::atof(v.c_str());
    else if (k == "--seed")
      seed = std::strtoull(v.c_str(), nullptr, 10);
    else if (k == "--timeout-s")
      timeout_s = std::atoi(v.c_str());
    else
      merak::fail("merak_nccl_allreduce: unknown flag {}", k);
  }
  if (n < 1 || d < 1 || iters < 1 || timeout_s < 1)
    merak::fail("merak_nccl_allreduce: bad --rows/--cols/--iters/--timeout-s");
  const auto bound = std::chrono::milliseconds(1000 * std::min(timeout_s, 60));
  merak::job::bootstrap_options bo;
  bo.timeout = bound;
  std::shared_ptr<merak::job::bootstrap> b =
      merak::job::connect_bootstrap(merak::job::resolve_bootstrap(bo));
  auto t = merak::comm::make_nccl_transport(b, {.timeout = bound});
  const int P = t->size(), rank = t->rank();
  const size_t count = size_t(n) * size_t(d);
  const auto mine = merak::bench::bench_gradient(n, d, density, seed, rank);
  std::vector<double> exact(count, 0.0);
  for (int k = 0; k < P; ++k) {
    const auto g = k == rank ? mine : merak::bench::bench_gradient(n, d, density, seed, k);
    for (size_t i = 0; i < count; ++i) exact[i] += g[i];
  }
  for (double& v : exact) v /= P;

  device_floats orig(count), work(count);
  cuda(cudaMemcpy(orig.p, mine.data(), count * 4, cudaMemcpyHostToDevice), "copy to device");
  using clock_type = std::chrono::steady_clock;
  std::vector<double> tot;
  t->reset_collective_bytes();
  for (int it = 0; it < iters + 1; ++it) {  // iteration 0 warms NCCL up, untimed
    cuda(cudaMemcpyAsync(work.p, orig.p, count * 4, cudaMemcpyDeviceToDevice, t->stream()),
         "restore");
    t->barrier();  // waits for the stream, so the restore is done too
    const auto t0 = clock_type::now();
    t->allreduce_avg(work.p, count);
    const auto t1 = clock_type::now();
    if (it > 0) tot.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
  }
  std::vector<float> result(count);
  cuda(cudaMemcpy(result.data(), work.p, count * 4, cudaMemcpyDeviceToHost), "copy to host");
  double err = 0, ref = 0;
  for (size_t i = 0; i < count; ++i) {
    err += (result[i] - exact[i]) * (result[i] - exact[i]);
    ref += exact[i] * exact[i];
  }
  b->barrier();
  if (rank != 0) return 0;
  const double ring = 2.0 * (P - 1) / P * double(count) * 4;
  const std::string json = fmt::format(
      "{{\"bench\":\"allreduce\",\"method\":\"nccl\",\"transport\":\"nccl\",\"procs\":{},"
      "\"rows\":{},\"cols\":{},\"row_density\":{},\"iters\":{},\"time_ms\":{:.4f},"
      "\"time_min_ms\":{:.4f},\"time_max_ms\":{:.4f},\"encode_ms\":0,\"comm_ms\":{:.4f},"
      "\"decode_ms\":0,\"bytes_per_rank\":{:.0f},\"bytes_counted\":false,\"rel_error\":{:.6g},"
      "\"nccl_version\":\"{}\",\"device\":{},\"buffer_mib\":{},\"launcher\":\"merak\"}}",
      P, n, d, density, iters, median(tot), *std::min_element(tot.begin(), tot.end()),
      *std::max_element(tot.begin(), tot.end()), median(tot), ring,
      ref > 0 ? std::sqrt(err / ref) : std::sqrt(err), merak::comm::nccl_version(), t->device(),
      double(count) * 4 / (1 << 20));
  if (const char* out = std::getenv("MERAK_BENCH_OUT")) {
    std::ofstream f(out);
    f << json << "\n";
    if (!f) merak::fail("merak_nccl_allreduce: cannot write {}", out);
  } else {
    std::printf("%s\n", json.c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
