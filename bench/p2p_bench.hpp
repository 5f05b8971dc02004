#pragma once
// `merak bench p2p`: one tensor moved between two processes, as the runtime
// moves a pipeline activation (comm/tensor_channel.hpp), against UCX's own
// point-to-point send of the same bytes on the same kind of transport; the
// channel both through the processes' shared ring (on one host, as in
// training) and without it.
// Ping-pong: the one-way time is half the median round trip.

#include <nlohmann/json.hpp>

#include <cstdint>
#include <vector>

namespace merak::bench {

struct p2p_bench_options {
  std::vector<int64_t> bytes = {int64_t(1) << 20};  // message sizes
  int iters = 200;                                  // round trips per size
  int warmup = 20;
  // Rank 0 sends from this many buffers in turn, as a stage sends a new
  // activation each micro-batch (a kernel's read of another process's
  // memory costs more for buffers it has not read recently).
  int buffers = 16;
  int timeout_s = 120;
  // The channel thread's polling after traffic (comm/tensor_channel.hpp);
  // -1: as in training, 200 us when the two channel threads fit on the cores
  // (actors/idle_wait.hpp).
  int spin_us = -1;
};

// Starts 2 processes of this program (the local launcher) and returns rank
// 0's result; in a launched worker (MERAK_BENCH_WORKER) measures and returns
// null on rank 1. Throws merak::error when a rank fails.
nlohmann::json run_p2p_bench(const p2p_bench_options& options);

}  // namespace merak::bench
