#pragma once
// `merak bench allreduce`: all-reduce of an (n, d) f32 gradient between real
// processes on this host (or threads, --transport inproc), with the methods
// dense (the ring of comm/collectives.hpp), coo, union, s2 (the codecs of
// comm/codec.hpp) and mpi (Open MPI's MPI_Allreduce, in the separate program
// merak_mpi_allreduce so that merak itself does not depend on MPI).
//
// Processes: without a launcher around it, the command starts --procs copies
// of its own binary with the same arguments (job/launcher.hpp: RANK,
// WORLD_SIZE, MASTER_ADDR, MASTER_PORT, MERAK_JOB_TOKEN) and prints rank 0's
// result. Under mpirun (OMPI_COMM_WORLD_SIZE set; pass MASTER_PORT with -x)
// each process is a worker directly. The mpi method runs
//   mpirun --allow-run-as-root --oversubscribe -np N merak_mpi_allreduce ...
// from the directory of the merak binary. The nccl method (GPU memory, one
// process per GPU) starts --procs copies of merak_nccl_allreduce, built only
// with CUDA and NCCL, from the same directory with the local launcher.
//
// Output: one JSON object, the fields of bench::codec_bench_result (time_ms is
// the median end-to-end time of rank 0, time_min_ms/time_max_ms the spread,
// bytes_per_rank counted by the transport) plus procs, ucx_tls, launcher.
// A method is one case of dispatch in allreduce_bench.cpp: the codec methods
// go through bench::bench_codec_over, so a new codec is a new codec_kind.

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>

namespace merak::bench {

struct allreduce_bench_options {
  int procs = 2;
  std::string method = "dense";      // dense | coo | union | s2 | mpi | nccl
  // allreduce | reduce-scatter | all-gather (the last two: dense or mpi)
  std::string op = "allreduce";
  std::string transport = "ucx";     // ucx | inproc
  int64_t rows = 4096, cols = 1024;  // n, d: 16 MiB by default
  double row_density = 1.0;          // share of non-zero rows per rank
  double sketch_ratio = 0.01;        // s2: r·w / (n·d)
  int sketch_rows = 1;               // s2: r
  std::string error_feedback = "off";
  std::string sketch_hash = "rows";  // s2: rows | elements
  bool known_rows = false;
  int iters = 10;
  uint64_t seed = 1;
  int timeout_s = 300;   // whole job; each wait is bounded by min(this, 60 s)
  std::string mpi_args;  // extra mpirun arguments (e.g. "--mca pml ob1")
};

// Runs the benchmark (as launcher or as worker, see above). Returns rank 0's
// JSON object, or null in a worker that is not the one to print. Throws
// merak::error on bad options or when a rank fails (naming it).
nlohmann::json run_allreduce_bench(const allreduce_bench_options& options);

}  // namespace merak::bench
