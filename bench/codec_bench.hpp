#pragma once
// Measurements of the gradient codecs, for `merak bench allreduce` and the
// figures of docs/s2-reducer.md. Functions here measure and return; the
// command prints. Each result prints as one JSON object (to_json).
//
// Test data: every rank's gradient is (n, d) with each row non-zero with
// probability `density` (independently per rank, so |U| ≈ P·density·n for
// small densities), values standard normal, drawn from (seed, rank).

#include <cstdint>
#include <string>
#include <vector>

#include "comm/codec.hpp"
#include "comm/transport.hpp"

namespace merak::bench {

// The median of the benchmarks' per-iteration times (0 for none).
double median(std::vector<double> v);

// Rank `rank`'s test gradient (n·d floats).
std::vector<float> bench_gradient(int64_t n, int64_t d, double density, uint64_t seed, int rank);

struct codec_bench_result {
  std::string method;     // dense | coo | union | s2
  std::string transport;  // "none" (pure, simulated ranks) or the transport's name
  int ranks = 0;          // P
  int64_t n = 0, d = 0;
  double density = 0;        // row density per rank
  double sketch_ratio = 0;   // r·w / (n·d), s2 only
  int sketch_rows = 0;       // r, s2 only
  int64_t sketch_width = 0;  // w, s2 only
  std::string feedback = "off";
  std::string hash;  // s2 only: rows | elements
  bool known_rows = false;
  int iters = 0;
  // Medians over iterations (ms); per rank. time_ms is end to end (encode +
  // comm + decode); pure runs report time_ms = encode + decode and comm_ms
  // as the simulated reduction (one thread summing all ranks: not a network
  // time).
  double time_ms = 0, encode_ms = 0, comm_ms = 0, decode_ms = 0;
  double time_min_ms = 0, time_max_ms = 0;  // spread of time_ms
  // Bytes sent per rank: counted by the transport, or for pure runs the
  // spec's ring formula applied to the messages.
  double bytes_per_rank = 0;
  double dense_bytes_per_rank = 0;  // 2(P-1)/P·n·d·4, for the ratio
  double rel_error = 0;             // ‖Ĝ − G̅‖₂ / ‖G̅‖₂, last iteration, rank 0
  int64_t own_rows = 0, union_rows = 0;

  std::string to_json() const;
};

struct codec_bench_options {
  int64_t n = 50000, d = 256;
  int ranks = 2;  // simulated ranks of the pure bench
  std::vector<double> densities = {0.01, 0.05};
  std::vector<double> sketch_ratios = {0.01, 0.05, 0.1, 0.2};
  int sketch_rows = 1;
  std::vector<comm::codec_kind> methods = {comm::codec_kind::dense, comm::codec_kind::coo,
                                           comm::codec_kind::union_rows, comm::codec_kind::s2};
  int iters = 5;
  uint64_t seed = 1;
  bool known_rows = false;  // as in codec_run_options
};

// Pure: P simulated ranks in this thread, reduce_messages in place of the
// collectives; one result per (method, density, and for s2 ratio).
std::vector<codec_bench_result> bench_codecs_pure(const codec_bench_options& options);

// One configuration of the benchmark over a transport.
struct codec_run_options {
  comm::codec_config config;  // method; sketch_ratio/width/rows/feedback/seed apply to s2
  int64_t n = 50000, d = 256;
  double density = 0.01;
  int iters = 10;
  uint64_t seed = 1;  // of the test gradients
  // Hand the codec the non-zero rows (codec::set_known_rows) as a trainer
  // that knows its batch's token ids would, instead of letting it scan.
  bool known_rows = false;
  comm::tag_t tag = 900;         // uses tags tag .. tag + 2
  comm::ring_options ring = {};  // chunking of reduce_rows' all-reduces
  // Back the gradient being reduced with transparent huge pages (2 MiB,
  // madvise; Linux only, ignored elsewhere or when refused): the rows of a
  // sparse step are scattered over n·d floats, one TLB miss each with 4 KiB
  // pages. A condition of the measurement, for every method alike.
  bool huge_pages = false;
};

// Over a transport: collective, every rank of `t` calls it with the same
// options; each rank returns its own timings (print rank 0's). Before the
// timed iterations the exact average is computed with a dense all-reduce;
// each iteration starts after a barrier, restores the gradient (untimed) and
// times reduce_rows end to end. Fails on iters < 1 or a bad config.
codec_bench_result bench_codec_over(comm::transport& t, const codec_run_options& options);

// The dense ring's halves over a transport (comm/collectives.hpp): each
// rank's gradient reduce-scattered (rank r keeps slice r of the sum), or
// each rank's slice r of its gradient all-gathered. Collective as above;
// rel_error compares this rank's result with the sum or the gathered slices
// computed here from every rank's gradient; bytes_per_rank is the
// transport's count.
// allgather_bf16: comm::allgather_shards_bf16 with no exact range (every
// element on the wire as bf16).
enum class ring_half { reduce_scatter, allgather, allgather_bf16 };
codec_bench_result bench_ring_half_over(comm::transport& t, const codec_run_options& options,
                                        ring_half half);

}  // namespace merak::bench
