// merak_mpi_allreduce: Open MPI's MPI_Allreduce on the buffers of
// `merak bench allreduce` (the anchor the dense ring is compared with), or
// with --op its halves: MPI_Reduce_scatter and MPI_Allgatherv over the same
// slices as merak's ring (rank r: elements shard_range(n d, P, r)). Run
// under mpirun; rank 0 prints one JSON object with the fields of the other
// methods. Kept out of merak so that nothing else depends on MPI.
//
//   mpirun -np N merak_mpi_allreduce --rows n --cols d --iters K
//          [--row-density x] [--seed s] [--timeout-s t]
//          [--op allreduce|reduce-scatter|all-gather]
//
// Each iteration: restore the gradient (untimed), MPI_Barrier, then time
// MPI_Allreduce(SUM, in place) (comm_ms) and the scaling by 1/P (decode_ms),
// as bench_codec_over does for the dense codec. bytes_per_rank is not
// measured (MPI does not count); it is reported as the ring formula with
// bytes_counted = false.

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench/codec_bench.hpp"

using merak::bench::median;

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, P = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &P);
  int64_t n = 4096, d = 1024;
  int iters = 10;
  double density = 1.0;
  uint64_t seed = 1;
  std::string op = "allreduce";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
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
    else if (k == "--op")
      op = v;
    else if (k == "--timeout-s") {
    } else {
      if (rank == 0) std::fprintf(stderr, "merak_mpi_allreduce: unknown flag %s\n", k.c_str());
      MPI_Abort(MPI_COMM_WORLD, 2);
    }
  }
  if (op != "allreduce" && op != "reduce-scatter" && op != "all-gather") {
    if (rank == 0) std::fprintf(stderr, "merak_mpi_allreduce: bad --op %s\n", op.c_str());
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  if (n < 1 || d < 1 || iters < 1 || n * d > (int64_t(1) << 31) - 1) {
    if (rank == 0) std::fprintf(stderr, "merak_mpi_allreduce: bad --rows/--cols/--iters\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  const int count = static_cast<int>(n * d);
  const std::vector<float> mine = merak::bench::bench_gradient(n, d, density, seed, rank);
  std::vector<double> exact(mine.begin(), mine.end());
  MPI_Allreduce(MPI_IN_PLACE, exact.data(), count, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  for (double& v : exact) v /= P;

  using clock_type = std::chrono::steady_clock;
  auto ms = [](clock_type::time_point a, clock_type::time_point b) {
    return std::chrono::duration<double, std::milli>(b - a).count();
  };
  // The slices of merak's ring: the first count % P one element longer.
  std::vector<int> counts(static_cast<size_t>(P)), displs(static_cast<size_t>(P));
  for (int r = 0, at = 0; r < P; ++r) {
    counts[size_t(r)] = count / P + (r < count % P ? 1 : 0);
    displs[size_t(r)] = at;
    at += counts[size_t(r)];
  }
  const int lo = displs[size_t(rank)], hi = lo + counts[size_t(rank)];
  std::vector<float> work(mine.size()), part(size_t(counts[size_t(rank)]));
  std::vector<double> tot, com, dec;
  for (int it = 0; it < iters; ++it) {
    if (op == "all-gather") {
      std::fill(work.begin(), work.end(), 0.f);
      std::copy(mine.begin() + lo, mine.begin() + hi, work.begin() + lo);
    } else {
      std::memcpy(work.data(), mine.data(), mine.size() * sizeof(float));
    }
    MPI_Barrier(MPI_COMM_WORLD);
    const auto t0 = clock_type::now();
    if (op == "allreduce")
      MPI_Allreduce(MPI_IN_PLACE, work.data(), count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    else if (op == "reduce-scatter")
      MPI_Reduce_scatter(work.data(), part.data(), counts.data(), MPI_FLOAT, MPI_SUM,
                         MPI_COMM_WORLD);
    else
      MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_FLOAT, work.data(), counts.data(), displs.data(),
                     MPI_FLOAT, MPI_COMM_WORLD);
    const auto t1 = clock_type::now();
    if (op == "allreduce") {
      const float inv = 1.0f / float(P);
      for (float& v : work) v *= inv;
    }
    const auto t2 = clock_type::now();
    tot.push_back(ms(t0, t2)), com.push_back(ms(t0, t1)), dec.push_back(ms(t1, t2));
  }
  // Against the exact mean (allreduce), this rank's slice of the sum, or
  // every rank's slice of its own gradient.
  double err = 0, ref = 0;
  auto add = [&](double got, double want) {
    err += (got - want) * (got - want);
    ref += want * want;
  };
  if (op == "allreduce") {
    for (size_t i = 0; i < work.size(); ++i) add(work[i], exact[i]);
  } else if (op == "reduce-scatter") {
    for (int i = lo; i < hi; ++i) add(part[size_t(i - lo)], exact[size_t(i)] * P);
  } else {
    for (int r = 0; r < P; ++r) {
      const auto g = merak::bench::bench_gradient(n, d, density, seed, r);
      for (int i = displs[size_t(r)]; i < displs[size_t(r)] + counts[size_t(r)]; ++i)
        add(work[size_t(i)], g[size_t(i)]);
    }
  }
  if (rank == 0) {
    const char* tls = std::getenv("UCX_TLS");
    const double ring =
        (op == "allreduce" ? 2.0 : 1.0) * (P - 1) / P * double(n) * double(d) * 4;
    std::printf(
        "{\"bench\":\"allreduce\",\"op\":\"%s\",\"method\":\"mpi\",\"transport\":\"mpi\",\"procs\":%d,"
        "\"rows\":%lld,\"cols\":%lld,\"row_density\":%g,\"iters\":%d,\"time_ms\":%.4f,"
        "\"time_min_ms\":%.4f,\"time_max_ms\":%.4f,\"encode_ms\":0,\"comm_ms\":%.4f,"
        "\"decode_ms\":%.4f,\"bytes_per_rank\":%.0f,\"bytes_counted\":false,"
        "\"rel_error\":%.6g,\"ucx_tls\":\"%s\",\"buffer_mib\":%g}\n",
        op.c_str(), P, static_cast<long long>(n), static_cast<long long>(d), density, iters,
        median(tot),
        *std::min_element(tot.begin(), tot.end()), *std::max_element(tot.begin(), tot.end()),
        median(com), median(dec), ring, ref > 0 ? std::sqrt(err / ref) : 0.0,
        tls && *tls ? tls : "default", double(n) * double(d) * 4 / (1 << 20));
  }
  MPI_Finalize();
  return 0;
}
