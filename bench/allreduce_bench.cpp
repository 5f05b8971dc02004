#include "bench/allreduce_bench.hpp"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

#include "bench/codec_bench.hpp"
#include "bench/worker_launch.hpp"
#include "comm/codec.hpp"
#include "comm/collectives.hpp"
#include "comm/inproc.hpp"
#include "job/bootstrap.hpp"
#include "job/launcher.hpp"
#ifdef MERAK_WITH_UCX
#include "comm/ucx_transport.hpp"
#endif
#include "core/error.hpp"

namespace merak::bench {
namespace {

using namespace std::chrono_literals;

std::string env_or(const char* var, const char* fallback) {
  const char* s = std::getenv(var);
  return s && *s ? s : fallback;
}

std::chrono::milliseconds wait_bound(const allreduce_bench_options& options) {
  return std::chrono::milliseconds(1000 * std::min(options.timeout_s, 60));
}

bench::codec_run_options run_options(const allreduce_bench_options& options) {
  bench::codec_run_options r;
  r.config.kind = comm::parse_codec_kind(options.method);
  r.config.sketch_rows = options.sketch_rows;
  r.config.sketch_ratio = options.sketch_ratio;
  r.config.feedback = comm::parse_error_feedback(options.error_feedback);
  r.config.hash = comm::parse_sketch_hash(options.sketch_hash);
  r.config.seed = options.seed;
  r.n = options.rows;
  r.d = options.cols;
  r.density = options.row_density;
  r.iters = options.iters;
  r.seed = options.seed;
  r.known_rows = options.known_rows;
  // Tuning knobs for measurements: the ring's chunk size and receives in
  // flight (ring_options; defaults 1 MiB and 4).
  if (const char* s = std::getenv("MERAK_RING_CHUNK_KB"))
    r.ring.chunk_bytes = size_t(std::atol(s)) << 10;
  if (const char* s = std::getenv("MERAK_RING_WINDOW")) r.ring.window = std::atoi(s);
  // All-reduces of at most this many KiB by recursive doubling
  // (ring_options::doubling_max_bytes).
  if (const char* s = std::getenv("MERAK_DOUBLING_KB"))
    r.ring.doubling_max_bytes = size_t(std::atol(s)) << 10;
  // MERAK_BENCH_HUGE_PAGES=1: the reduced gradient on transparent huge pages
  // (codec_run_options::huge_pages).
  if (const char* s = std::getenv("MERAK_BENCH_HUGE_PAGES")) r.huge_pages = std::atoi(s) != 0;
  return r;
}

nlohmann::json finish(const bench::codec_bench_result& r, const allreduce_bench_options& options,
                      const char* launcher, const std::string& ucx_setting = "") {
  auto j = nlohmann::json::parse(r.to_json());
  j["bench"] = "allreduce";
  j["op"] = options.op;
  j["ucx_tls"] = env_or("UCX_TLS", "default");
  // What the transport asked UCX for (ucx_setting_of): e.g. posix,cma,self;rndv>=1048576.
  if (!ucx_setting.empty()) j["ucx_setting"] = ucx_setting;
  j["launcher"] = launcher;
  j["buffer_mib"] = double(options.rows) * double(options.cols) * 4 / (1 << 20);
  return j;
}

// The configured method on `t`: the codec's all-reduce, or a half of the
// dense ring (--op).
bench::codec_bench_result measure(comm::transport& t, const allreduce_bench_options& options) {
  if (options.op == "reduce-scatter")
    return bench::bench_ring_half_over(t, run_options(options), bench::ring_half::reduce_scatter);
  if (options.op == "all-gather")
    return bench::bench_ring_half_over(t, run_options(options), bench::ring_half::allgather);
  if (options.op == "all-gather-bf16")
    return bench::bench_ring_half_over(t, run_options(options), bench::ring_half::allgather_bf16);
  return bench::bench_codec_over(t, run_options(options));
}

// One process of a multi-process run: join, build the transport, measure.
nlohmann::json run_worker(const allreduce_bench_options& options, const char* launcher) {
  job::bootstrap_options bo;
  bo.timeout = wait_bound(options);
  std::shared_ptr<job::bootstrap> b = job::connect_bootstrap(job::resolve_bootstrap(bo));
  std::unique_ptr<comm::transport> t;
  if (options.transport == "ucx") {
#ifdef MERAK_WITH_UCX
    comm::ucx_options uo{.timeout = wait_bound(options)};
    // Tuning knobs: how long a wait busy-polls (then polls and yields)
    // before sleeping on the event fd (ucx_options::spin, yield_spin).
    if (const char* s = std::getenv("MERAK_UCX_SPIN_US"))
      uo.spin = std::chrono::microseconds(std::atol(s));
    if (const char* s = std::getenv("MERAK_UCX_YIELD_US"))
      uo.yield_spin = std::chrono::microseconds(std::atol(s));
    if (const char* s = std::getenv("MERAK_UCX_COLLECTIVE_SPIN_US"))
      uo.collective_spin = std::chrono::microseconds(std::atol(s));
    // MERAK_UCX_CMA=0: shared memory without cma (ucx_options::cma);
    // MERAK_UCX_CMA_MIN_KB: its rendezvous threshold.
    if (const char* s = std::getenv("MERAK_UCX_CMA")) uo.cma = std::atoi(s) != 0;
    if (const char* s = std::getenv("MERAK_UCX_CMA_MIN_KB"))
      uo.cma_min_bytes = size_t(std::atol(s)) << 10;
    t = comm::make_ucx_transport(b, uo);
#else
    fail("bench allreduce: this build has no UCX transport (MERAK_WITH_UCX)");
#endif
  } else {
    fail(
        "bench allreduce: transport '{}' cannot span processes (use ucx, or inproc without "
        "a launcher)",
        options.transport);
  }
  auto res = measure(*t, options);
  b->barrier();  // nobody closes while another still receives
  if (b->rank() != 0) return nullptr;
#ifdef MERAK_WITH_UCX
  auto j = finish(res, options, launcher, comm::ucx_setting_of(*t));
#else
  auto j = finish(res, options, launcher);
#endif
  if (const char* out = std::getenv("MERAK_BENCH_OUT")) {
    std::ofstream f(out);
    f << j.dump() << "\n";
    if (!f) fail("bench allreduce: cannot write {}", out);
    return nullptr;
  }
  return j;
}

// Threads of this process over the in-process transport.
nlohmann::json run_inproc(const allreduce_bench_options& options) {
  auto group = comm::make_inproc_group(options.procs, wait_bound(options));
  std::vector<bench::codec_bench_result> res(options.procs);
  std::vector<std::string> errors(options.procs);
  std::vector<std::thread> threads;
  for (int r = 0; r < options.procs; ++r)
    threads.emplace_back([&, r] {
      try {
        res[r] = measure(*group[r], options);
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < options.procs; ++r)
    if (!errors[r].empty()) fail("bench allreduce: rank {}: {}", r, errors[r]);
  return finish(res[0], options, "threads");
}

// Starts `lo` and returns rank 0's result (worker_launch.hpp), every wait
// bounded as this benchmark's are.
nlohmann::json launch_for_result(job::launch_options lo, const allreduce_bench_options& options,
                                 const std::string& what) {
  lo.grace = wait_bound(options) + 5s;
  lo.timeout = std::chrono::seconds(options.timeout_s);
  return bench::launch_for_result(std::move(lo), what);
}

// Starts o.procs workers of this binary and returns rank 0's result.
nlohmann::json run_launcher(const allreduce_bench_options& options) {
  job::launch_options lo;
  lo.procs = options.procs;
  lo.argv = own_argv("bench allreduce");
  lo.env["MERAK_BENCH_WORKER"] = "1";
  return launch_for_result(std::move(lo), options, "bench allreduce");
}

std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// Open MPI's MPI_Allreduce on the same buffers, in merak_mpi_allreduce.
nlohmann::json run_mpi(const allreduce_bench_options& options) {
  const auto dir = std::filesystem::path(job::self_executable()).parent_path();
  const auto worker = dir / "merak_mpi_allreduce";
  if (!std::filesystem::exists(worker))
    fail(
        "bench allreduce: method mpi needs {} (built when CMake finds MPI; Debian: "
        "libopenmpi-dev)",
        worker.string());
  std::string cmd =
      "mpirun --allow-run-as-root --oversubscribe -np " + std::to_string(options.procs);
  if (std::getenv("UCX_TLS")) cmd += " -x UCX_TLS";
  if (!options.mpi_args.empty()) cmd += " " + options.mpi_args;
  cmd += " " + shell_quote(worker.string()) +
         fmt::format(
             " --rows {} --cols {} --iters {} "
             "--row-density {} --seed {} --op {}",
             options.rows, options.cols, options.iters, options.row_density, options.seed,
             options.op);
  cmd += fmt::format(" --timeout-s {}", options.timeout_s);
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) fail("bench allreduce: cannot run {}", cmd);
  std::string out, last;
  char buf[4096];
  while (std::fgets(buf, sizeof buf, p)) out += buf;
  const int rc = ::pclose(p);
  std::istringstream lines(out);
  for (std::string l; std::getline(lines, l);)
    if (!l.empty() && l[0] == '{') last = l;
  if (rc != 0 || last.empty())
    fail("bench allreduce: '{}' failed (status {}): {}", cmd, rc, out.substr(0, 2000));
  auto j = nlohmann::json::parse(last);
  j["launcher"] = "mpirun";
  j["mpi_args"] = options.mpi_args;  // e.g. the BTL: Open MPI ignores UCX_TLS with its default ob1
  return j;
}

// NCCL's all-reduce on GPU memory, in merak_nccl_allreduce: --procs copies
// (one per GPU) started by the local launcher; rank 0 writes the JSON.
nlohmann::json run_nccl(const allreduce_bench_options& options) {
  const auto dir = std::filesystem::path(job::self_executable()).parent_path();
  const auto worker = dir / "merak_nccl_allreduce";
  if (!std::filesystem::exists(worker))
    fail(
        "bench allreduce: method nccl needs {} (built when CMake finds CUDA with NCCL, "
        "MERAK_WITH_CUDA)",
        worker.string());
  job::launch_options lo;
  lo.procs = options.procs;
  lo.argv = {worker.string(),
             "--rows",
             std::to_string(options.rows),
             "--cols",
             std::to_string(options.cols),
             "--iters",
             std::to_string(options.iters),
             "--row-density",
             fmt::format("{}", options.row_density),
             "--seed",
             std::to_string(options.seed),
             "--timeout-s",
             std::to_string(options.timeout_s)};
  return launch_for_result(std::move(lo), options, "bench allreduce: method nccl");
}

}  // namespace

nlohmann::json run_allreduce_bench(const allreduce_bench_options& options) {
  if (options.procs < 1) fail("bench allreduce: --procs {} must be at least 1", options.procs);
  if (options.rows < 1 || options.cols < 1)
    fail("bench allreduce: --rows and --cols must be positive");
  if (options.iters < 1) fail("bench allreduce: --iters {} must be at least 1", options.iters);
  if (options.row_density < 0 || options.row_density > 1)
    fail("bench allreduce: --row-density {} must be in [0, 1]", options.row_density);
  if (options.transport != "ucx" && options.transport != "inproc")
    fail("bench allreduce: --transport '{}' (ucx or inproc)", options.transport);
  if (options.op != "allreduce" && options.op != "reduce-scatter" && options.op != "all-gather" &&
      options.op != "all-gather-bf16")
    fail("bench allreduce: --op '{}' (allreduce, reduce-scatter, all-gather or all-gather-bf16)",
         options.op);
  if (options.op == "all-gather-bf16" && options.method != "dense")
    fail("bench allreduce: --op all-gather-bf16 runs with --method dense (the ring), not '{}'",
         options.method);
  if (options.op != "allreduce" && options.method != "dense" && options.method != "mpi")
    fail("bench allreduce: --op {} runs with --method dense (the ring) or mpi, not '{}'",
         options.op, options.method);
  const bool under_mpirun = std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr;
  const bool worker = std::getenv("MERAK_BENCH_WORKER") != nullptr;
  if (options.method == "mpi") {
    if (under_mpirun || worker)
      fail(
          "bench allreduce: run --method mpi without mpirun; it starts merak_mpi_allreduce "
          "under mpirun itself");
    return run_mpi(options);
  }
  if (options.method == "nccl") {
    if (under_mpirun || worker)
      fail("bench allreduce: run --method nccl without a launcher; it starts its own workers");
    return run_nccl(options);
  }
  (void)comm::parse_codec_kind(options.method);  // fails naming a bad method
  if (worker) return run_worker(options, "merak");
  if (under_mpirun) return run_worker(options, "mpirun");
  if (options.transport == "inproc") return run_inproc(options);
  return run_launcher(options);
}

}  // namespace merak::bench
