#include "bench/codec_bench.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "comm/collectives.hpp"
#include "comm/row_sparse.hpp"
#include "comm/s2.hpp"
#include "core/error.hpp"
#include "core/rng.hpp"

namespace merak::bench {

using namespace merak::comm;

namespace {

using clock_type = std::chrono::steady_clock;

double ms_since(clock_type::time_point t0) {
  return std::chrono::duration<double, std::milli>(clock_type::now() - t0).count();
}

codec_bench_result describe(const codec_config& c, int ranks, int64_t n, int64_t d, double density,
                            int iters) {
  codec_bench_result r;
  r.method = std::string(codec_kind_name(c.kind));
  r.ranks = ranks, r.n = n, r.d = d, r.density = density, r.iters = iters;
  if (c.kind == codec_kind::s2) {
    r.sketch_rows = c.sketch_rows;
    r.sketch_width = s2_sketch_width(c, n, d);
    r.sketch_ratio = double(r.sketch_rows) * double(r.sketch_width) / (double(n) * double(d));
    r.feedback = std::string(error_feedback_name(c.feedback));
    r.hash = std::string(sketch_hash_name(c.hash));
  }
  r.dense_bytes_per_rank = 2.0 * (ranks - 1) / ranks * double(n) * double(d) * 4;
  return r;
}

// n floats, 2 MiB aligned, advised to be backed by huge pages when `huge`
// (before the first touch, so that the kernel can fault them in as such).
struct float_buffer {
  struct free_deleter {
    void operator()(float* p) const { std::free(p); }
  };
  std::unique_ptr<float[], free_deleter> data;
  std::span<float> view;
  float_buffer(size_t n, bool huge) {
    constexpr size_t kalign = size_t{2} << 20;
    const size_t bytes =
        std::max<size_t>(kalign, (n * sizeof(float) + kalign - 1) / kalign * kalign);
    data.reset(static_cast<float*>(std::aligned_alloc(kalign, bytes)));
    if (!data) fail("codec bench: cannot allocate {} bytes", bytes);
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    if (huge) madvise(data.get(), bytes, MADV_HUGEPAGE);  // advice: refused is fine
#else
    (void)huge;
#endif
    view = std::span<float>(data.get(), n);
    std::fill(view.begin(), view.end(), 0.0f);
  }
};

}  // namespace

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

std::vector<float> bench_gradient(int64_t n, int64_t d, double density, uint64_t seed, int rank) {
  std::vector<float> g(size_t(n * d), 0.0f);
  rng rows(seed, 2 * uint64_t(rank) + 1), vals(seed, 2 * uint64_t(rank) + 2);
  for (int64_t k = 0; k < n; ++k) {
    if (rows.uniform() >= density) continue;
    for (int64_t c = 0; c < d; ++c) g[size_t(k * d + c)] = float(vals.normal());
  }
  return g;
}

std::string codec_bench_result::to_json() const {
  return fmt::format(
      "{{\"bench\":\"codec\",\"method\":\"{}\",\"transport\":\"{}\",\"procs\":{},\"rows\":{},"
      "\"cols\":{},\"row_density\":{},\"sketch_ratio\":{},\"sketch_rows\":{},\"sketch_width\":{},"
      "\"error_feedback\":\"{}\",\"sketch_hash\":\"{}\",\"known_rows\":{},\"iters\":{},\"time_ms\":"
      "{:.4f},\"time_min_ms\":"
      "{:.4f},"
      "\"time_max_ms\":{:.4f},\"encode_ms\":{:.4f},\"comm_ms\":{:.4f},\"decode_ms\":{:.4f},"
      "\"bytes_per_rank\":{:.0f},\"dense_bytes_per_rank\":{:.0f},\"bytes_vs_dense\":{:.5f},"
      "\"rel_error\":{:.6g},\"own_rows\":{},\"union_rows\":{}}}",
      method, transport, ranks, n, d, density, sketch_ratio, sketch_rows, sketch_width, feedback,
      hash, known_rows, iters, time_ms, time_min_ms, time_max_ms, encode_ms, comm_ms, decode_ms,
      bytes_per_rank, dense_bytes_per_rank,
      dense_bytes_per_rank > 0 ? bytes_per_rank / dense_bytes_per_rank : 0.0, rel_error, own_rows,
      union_rows);
}

std::vector<codec_bench_result> bench_codecs_pure(const codec_bench_options& options) {
  if (options.ranks < 1 || options.iters < 1)
    fail("codec bench: ranks {} and iters {} must be >= 1", options.ranks, options.iters);
  const int P = options.ranks;
  const int64_t n = options.n, d = options.d;
  std::vector<codec_bench_result> out;
  for (double density : options.densities) {
    std::vector<std::vector<float>> grads, work(static_cast<size_t>(P));
    std::vector<std::vector<uint32_t>> rows(static_cast<size_t>(P));
    for (int r = 0; r < P; ++r) {
      grads.push_back(bench_gradient(n, d, density, options.seed, r));
      if (options.known_rows) nonzero_rows(grads.back(), n, d, rows[size_t(r)]);
    }
    std::vector<float> exact = grads[0];
    for (int r = 1; r < P; ++r)
      for (size_t i = 0; i < exact.size(); ++i) exact[i] += grads[size_t(r)][i];
    for (float& v : exact) v /= float(P);

    std::vector<codec_config> configs;
    for (codec_kind k : options.methods) {
      if (k != codec_kind::s2) {
        configs.push_back({.kind = k});
        continue;
      }
      for (double y : options.sketch_ratios)
        configs.push_back({.kind = k,
                           .sketch_rows = options.sketch_rows,
                           .sketch_ratio = y,
                           .seed = options.seed});
    }
    for (const codec_config& config : configs) {
      codec_bench_result res = describe(config, P, n, d, density, options.iters);
      res.transport = "none";
      res.known_rows = options.known_rows;
      std::vector<std::unique_ptr<codec>> codecs;
      for (int r = 0; r < P; ++r) codecs.push_back(make_codec(config));
      std::vector<double> enc, com, dec, tot;
      for (int it = 0; it < options.iters; ++it) {
        for (int r = 0; r < P; ++r) work[size_t(r)] = grads[size_t(r)];
        std::vector<codec_message> msgs(static_cast<size_t>(P));
        std::vector<codec_message*> ptrs;
        for (auto& m : msgs) ptrs.push_back(&m);
        double e = 0, c = 0, dd = 0, bytes = 0;
        auto t0 = clock_type::now();
        for (int r = 0; r < P; ++r) {
          if (options.known_rows) codecs[size_t(r)]->set_known_rows(rows[size_t(r)]);
          codecs[size_t(r)]->encode(work[size_t(r)], n, d, P, msgs[size_t(r)]);
        }
        e += ms_since(t0);
        for (;;) {
          // Ring formulas for what this round would send per rank.
          const double ring = 2.0 * (P - 1) / P;
          bytes += ring * double(msgs[0].bits.size() * 8 + msgs[0].sum.size() * 4);
          if (msgs[0].has_gather) {
            double all = 0;
            for (auto& m : msgs) all += double(m.gather.size());
            bytes += double(P - 1) / P * all;
          }
          t0 = clock_type::now();
          reduce_messages(ptrs);
          c += ms_since(t0);
          t0 = clock_type::now();
          bool more = false;
          for (int r = 0; r < P; ++r) more = codecs[size_t(r)]->advance(msgs[size_t(r)]);
          e += ms_since(t0);
          if (!more) break;
        }
        t0 = clock_type::now();
        for (int r = 0; r < P; ++r) codecs[size_t(r)]->decode(msgs[size_t(r)], work[size_t(r)]);
        dd += ms_since(t0);
        enc.push_back(e / P), com.push_back(c), dec.push_back(dd / P), tot.push_back((e + dd) / P);
        res.bytes_per_rank = bytes;
      }
      res.encode_ms = median(enc), res.comm_ms = median(com), res.decode_ms = median(dec);
      res.time_ms = median(tot);
      res.time_min_ms = *std::min_element(tot.begin(), tot.end());
      res.time_max_ms = *std::max_element(tot.begin(), tot.end());
      res.rel_error = relative_l2_error(work[0], exact);
      res.own_rows = codecs[0]->own_rows(), res.union_rows = codecs[0]->union_rows();
      out.push_back(res);
    }
  }
  return out;
}

codec_bench_result bench_codec_over(transport& t, const codec_run_options& options) {
  if (options.iters < 1) fail("codec bench: iters {} must be >= 1", options.iters);
  const int P = t.size();
  const int64_t n = options.n, d = options.d;
  codec_bench_result res = describe(options.config, P, n, d, options.density, options.iters);
  res.transport = t.name();
  res.known_rows = options.known_rows;
  const std::vector<float> mine = bench_gradient(n, d, options.density, options.seed, t.rank());
  std::vector<uint32_t> rows;
  if (options.known_rows) nonzero_rows(mine, n, d, rows);
  std::vector<float> exact = mine;
  allreduce_sum(t, exact, options.tag);
  for (float& v : exact) v /= float(P);
  auto c = make_codec(options.config);
  float_buffer buffer(mine.size(), options.huge_pages);
  std::span<float> work = buffer.view;
  std::vector<double> enc, com, dec, tot, bytes;
  for (int it = 0; it < options.iters; ++it) {
    std::memcpy(work.data(), mine.data(), mine.size() * sizeof(float));
    barrier(t, options.tag + 1);
    codec_stats st;
    const auto t0 = clock_type::now();
    if (options.known_rows) c->set_known_rows(rows);
    reduce_rows(*c, t, work, n, d, options.tag + 2, &st, options.ring);
    tot.push_back(ms_since(t0));
    enc.push_back(st.encode_s * 1e3), com.push_back(st.comm_s * 1e3),
        dec.push_back(st.decode_s * 1e3), bytes.push_back(double(st.bytes_sent));
    res.own_rows = st.own_rows, res.union_rows = st.union_rows;
  }
  barrier(t,
          options.tag + 1);  // every send done before the caller blocks elsewhere (transport.hpp)
  res.encode_ms = median(enc), res.comm_ms = median(com), res.decode_ms = median(dec);
  res.time_ms = median(tot);
  res.time_min_ms = *std::min_element(tot.begin(), tot.end());
  res.time_max_ms = *std::max_element(tot.begin(), tot.end());
  res.bytes_per_rank = median(bytes);
  res.rel_error = relative_l2_error(work, exact);
  return res;
}

codec_bench_result bench_ring_half_over(comm::transport& t, const codec_run_options& options,
                                        ring_half half) {
  if (options.iters < 1) fail("codec bench: iters {} must be >= 1", options.iters);
  const int P = t.size(), me = t.rank();
  const int64_t n = options.n, d = options.d;
  codec_bench_result res = describe(options.config, P, n, d, options.density, options.iters);
  res.method = half == ring_half::reduce_scatter ? "reduce-scatter"
               : half == ring_half::allgather    ? "all-gather"
                                                  : "all-gather-bf16";
  res.transport = t.name();
  const size_t N = size_t(n * d);
  // What rank `me` must end with: its slice of the sum, or every rank's
  // slice of that rank's gradient.
  std::vector<float> mine = bench_gradient(n, d, options.density, options.seed, me);
  std::vector<double> sum(N, 0.0);
  std::vector<float> expected(N, 0.f);
  for (int r = 0; r < P; ++r) {
    const auto g = r == me ? mine : bench_gradient(n, d, options.density, options.seed, r);
    const auto [lo, hi] = comm::shard_range(N, P, r);
    for (size_t i = 0; i < N; ++i) sum[i] += g[i];
    std::copy(g.begin() + std::ptrdiff_t(lo), g.begin() + std::ptrdiff_t(hi),
              expected.begin() + std::ptrdiff_t(lo));
    if (half == ring_half::allgather_bf16 && r != me)  // others' slices arrive rounded
      for (size_t i = lo; i < hi; ++i) expected[i] = to_f32(to_bf16(expected[i]));
  }
  const auto [lo, hi] = comm::shard_range(N, P, me);
  if (half == ring_half::reduce_scatter)
    for (size_t i = lo; i < hi; ++i) expected[i] = float(sum[i]);
  float_buffer buffer(N, options.huge_pages);
  std::span<float> work = buffer.view;
  std::vector<double> tot, bytes;
  for (int it = 0; it < options.iters; ++it) {
    if (half == ring_half::reduce_scatter) {
      std::memcpy(work.data(), mine.data(), N * sizeof(float));
    } else {
      std::fill(work.begin(), work.end(), 0.f);
      std::copy(mine.begin() + std::ptrdiff_t(lo), mine.begin() + std::ptrdiff_t(hi),
                work.begin() + std::ptrdiff_t(lo));
    }
    barrier(t, options.tag + 1);
    const uint64_t sent = t.bytes_sent();
    const auto t0 = clock_type::now();
    if (half == ring_half::reduce_scatter)
      comm::reduce_scatter_sum(t, work, options.tag + 2, options.ring);
    else if (half == ring_half::allgather)
      comm::allgather_shards(t, work.data(), N, sizeof(float), options.tag + 2);
    else
      comm::allgather_shards_bf16(t, work, {}, options.tag + 2);
    tot.push_back(ms_since(t0));
    bytes.push_back(double(t.bytes_sent() - sent));
  }
  barrier(t, options.tag + 1);
  res.comm_ms = res.time_ms = median(tot);
  res.time_min_ms = *std::min_element(tot.begin(), tot.end());
  res.time_max_ms = *std::max_element(tot.begin(), tot.end());
  res.bytes_per_rank = median(bytes);
  res.dense_bytes_per_rank = double(P - 1) / P * double(N) * 4;
  // Reduce-scatter: only this rank's slice is defined.
  const size_t a = half == ring_half::reduce_scatter ? lo : 0,
               b = half == ring_half::reduce_scatter ? hi : N;
  res.rel_error =
      relative_l2_error(work.subspan(a, b - a), std::span<const float>(expected).subspan(a, b - a));
  return res;
}

}  // namespace merak::bench
