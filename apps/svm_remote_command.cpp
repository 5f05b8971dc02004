// `merak svm train --procs K` (consensus side, optionally launching the
// workers) and `merak svm worker` (one row shard in its own process).
#include "apps/svm_remote_command.hpp"
#include "apps/tls_flags.hpp"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <iostream>
#include <memory>
#include <mutex>
#include <thread>

#include "actors/svm_remote.hpp"
#include "job/auth.hpp"
#include "job/bootstrap.hpp"
#include "job/launcher.hpp"
#include "core/error.hpp"
#include "svm/data_reader.hpp"
#include "svm/fit.hpp"

namespace merak::apps {
namespace {

struct endpoint {
  std::string host;
  int port = 0;
};

// HOST:PORT or HOST (port 0 when allowed).
endpoint parse_endpoint(const std::string& text, const char* flag, bool port_optional) {
  endpoint e;
  const size_t colon = text.rfind(':');
  e.host = text.substr(0, colon);
  if (colon == std::string::npos) {
    if (!port_optional) fail("{} '{}': expected HOST:PORT", flag, text);
    return e;
  }
  const std::string port = text.substr(colon + 1);
  size_t used = 0;
  try {
    e.port = std::stoi(port, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (e.host.empty() || port.empty() || used != port.size() || e.port < 0 || e.port > 65535 ||
      (e.port == 0 && !port_optional))
    fail("{} '{}': expected HOST:PORT with a port in 1..65535", flag, text);
  return e;
}

std::chrono::milliseconds timeout_ms(double s, const char* flag) {
  // A year at most: beyond, the clocks' nanoseconds overflow an int64.
  if (!(s > 0 && s <= 31536000))
    fail("{} must be a number above 0 and at most 31536000 seconds (got {})", flag, s);
  return std::chrono::milliseconds(int64_t(s * 1000));
}

// The launcher runs in a thread of its own (it blocks until every worker
// process exited); the consensus side polls it while workers join.
struct local_workers {
  std::mutex m;
  bool finished = false;
  job::launch_result result;
  std::string error;
  std::promise<void> done;
};

// Runs `consensus(o)` (the consensus side) with the options of t; without
// --listen it first starts the workers (this program, `svm worker`) on
// loopback, and joins their launcher on every way out.
template <class F>
auto with_workers(const svm_remote_train& t, bool full_fit, F&& consensus) {
  if (t.procs < 1) fail("--procs must be at least 1 (got {})", t.procs);
  const bool launch = t.listen.empty();
  if (launch && t.data.empty()) fail("--data is required (the workers read it)");
  actors::svm_remote_options o;
  o.admm = svm::consensus_options_of(t.fit);
  o.standardize = t.fit.standardize;
  o.timeout = timeout_ms(t.timeout_s, "--timeout-s");
  o.folds = t.folds;
  o.full_fit = full_fit;
  o.warm = t.warm;
  if (!launch) {
    const endpoint e = parse_endpoint(t.listen, "--listen", true);
    o.host = e.host, o.port = uint16_t(e.port);
  }
  o.token = t.token;
  if (o.token.empty())
    if (const char* env = std::getenv("MERAK_JOB_TOKEN")) o.token = env;
  const bool made_token = o.token.empty();
  if (made_token) o.token = job::random_token();
  o.tls = t.tls;  // exported as MERAK_TLS_*: the workers started here inherit it

  auto workers = std::make_shared<local_workers>();
  std::thread launcher;
  std::future<void> launcher_done = workers->done.get_future();
  if (launch) {
    o.on_listening = [&](uint16_t port) {
      job::launch_options lo;
      lo.procs = t.procs;
      lo.argv = {job::self_executable(),
                 "svm",
                 "worker",
                 "--connect",
                 fmt::format("127.0.0.1:{}", port),
                 "--data",
                 t.data,
                 "--format",
                 t.format,
                 "--world",
                 std::to_string(t.procs),
                 "--timeout-s",
                 fmt::format("{}", t.timeout_s),
                 "--threads",
                 std::to_string(t.threads > 0 ? t.threads : 1)};
      // The rank comes from RANK (set by the launcher); the token travels in
      // the environment, not on the command line (visible in ps).
      const std::string token = o.token;
      lo.rank_env = [token](int, std::map<std::string, std::string>& env) {
        env["MERAK_JOB_TOKEN"] = token;
      };
      lo.grace = std::chrono::milliseconds(2000);
      launcher = std::thread([workers, lo] {
        job::launch_result r;
        std::string error;
        try {
          r = job::launch_local(lo);
        } catch (const std::exception& e) {
          error = e.what();
        }
        std::lock_guard<std::mutex> g(workers->m);
        workers->result = std::move(r);
        workers->error = std::move(error);
        workers->finished = true;
        workers->done.set_value();
      });
    };
    o.abort_check = [workers]() -> std::string {
      std::lock_guard<std::mutex> g(workers->m);
      if (!workers->finished) return {};
      if (!workers->error.empty()) return workers->error;
      return workers->result.ok() ? "every worker process exited" : workers->result.message;
    };
  } else {
    o.on_listening = [&](uint16_t port) {
      std::fprintf(stderr,
                   "merak svm: waiting for %d workers at %s:%u: merak svm worker --connect "
                   "%s:%u --world %d --rank R --data FILE%s\n",
                   t.procs, o.host.c_str(), unsigned(port), o.host.c_str(), unsigned(port), t.procs,
                   made_token ? (" --token " + o.token).c_str() : " (job token as given)");
    };
  }
  // The launcher thread must be joined on every way out; its workers exit
  // once the consensus side stops them or goes away. Should one not, it is
  // left to die with this process (the launcher sets PR_SET_PDEATHSIG).
  auto join_launcher = [&](std::chrono::seconds wait) {
    if (!launcher.joinable()) return;
    if (launcher_done.wait_for(wait) == std::future_status::ready)
      launcher.join();
    else
      launcher.detach();
  };
  decltype(consensus(o)) r;
  try {
    r = consensus(o);
  } catch (...) {
    // The workers were told to stop; one that is hung (SIGSTOP) is killed
    // as this process exits.
    join_launcher(std::chrono::seconds(3));
    throw;
  }
  join_launcher(std::chrono::seconds(10));
  return r;
}

}  // namespace

void run_svm_path_remote(const svm_remote_train& t, const std::vector<svm::penalty>& pens,
                         bool full_fit,
                         const std::function<void(const svm::path_point&)>& on_point) {
  const auto to_point = [&](size_t i, const actors::svm_remote_result& r) {
    svm::path_point pt;
    pt.lambda = pens[i].lambda, pt.theta = pens[i].theta, pt.lla = r.lla;
    if (full_fit) {
      pt.objective = r.fit.objective, pt.iterations = r.fit.iterations;
      pt.converged = r.fit.converged, pt.nnz = (r.fit.w.array() != 0).count();
      pt.accuracy = r.accuracy, pt.time_s = r.fit.time_s;
    }
    if (t.folds >= 2)
      pt.cv_accuracy = r.cv_accuracy, pt.cv_mean_nnz = r.cv_mean_nnz, pt.cv_time_s = r.cv_time_s;
    on_point(pt);
  };
  with_workers(t, full_fit, [&](const actors::svm_remote_options& o) {
    return actors::consensus_path_remote(t.procs, pens, o, to_point);
  });
}

void print_nonconvex(bool lla, svm::lla_start start) {
  if (lla)
    std::printf("nonconvex   lla (reweighted L1 steps, start %s)\n", svm::lla_start_name(start));
  else
    std::printf("nonconvex   direct ADMM\n");
}

int run_svm_train_remote(const svm_remote_train& t) {
  const actors::svm_remote_result r =
      with_workers(t, true, [&](const actors::svm_remote_options& o) {
        return actors::consensus_fit_remote(t.procs, t.fit.pen, o);
      });

  svm::linear_model m;
  m.w = r.fit.w.cwiseProduct(r.scale);
  m.b = r.fit.b;
  m.pen = t.fit.pen;
  m.objective = r.fit.objective;
  m.iterations = r.fit.iterations;
  nlohmann::json out{
      {"data", t.data},
      {"samples", r.samples},
      {"features", r.features},
      {"penalty", svm::penalty_name(t.fit.pen.kind)},
      {"lambda", t.fit.pen.lambda},
      {"theta", t.fit.pen.theta},
      {"workers", t.procs},
      {"procs", t.procs},
      {"transport", "caf-io"},
      {"join_s", r.join_s},
      {"objective", r.fit.objective},
      {"iterations", r.fit.iterations},
      {"converged", r.fit.converged},
      {"nnz", m.nnz()},
      {"nnz_percent", 100.0 * double(m.nnz()) / double(std::max<int64_t>(1, r.features))},
      {"accuracy", r.accuracy},
      {"time_s", r.fit.time_s}};
  if (t.fit.pen.kind != svm::penalty_kind::l1) out["nonconvex"] = r.lla ? "lla" : "direct";
  if (r.lla) out["lla_start"] = svm::lla_start_name(t.fit.lla_opts.start);
  if (t.folds >= 2) {
    out["folds"] = t.folds;
    out["cv_accuracy"] = r.cv_accuracy;
    out["cv_mean_nnz"] = r.cv_mean_nnz;
    out["cv_mean_iterations"] = r.cv_mean_iterations;
    out["cv_time_s"] = r.cv_time_s;
  }
  if (!t.model.empty()) {
    svm::write_model(m, t.model);
    out["model"] = t.model;
  }
  if (t.json) {
    std::cout << out.dump() << std::endl;
    return 0;
  }
  std::printf("data        %s (%lld samples, %lld features, read by %d worker processes)\n",
              t.data.empty() ? "(the workers')" : t.data.c_str(), (long long)r.samples,
              (long long)r.features, t.procs);
  std::printf("penalty     %s\n", t.fit.pen.str().c_str());
  if (out.contains("nonconvex")) print_nonconvex(r.lla, t.fit.lla_opts.start);
  std::printf("objective   %.8g\n", r.fit.objective);
  std::printf("iterations  %d%s\n", r.fit.iterations,
              r.fit.converged ? "" : " (iteration cap reached)");
  std::printf("nnz         %lld of %lld (%.2f%%)\n", (long long)m.nnz(), (long long)r.features,
              out["nnz_percent"].get<double>());
  std::printf("accuracy    %.4f (training data)\n", r.accuracy);
  if (t.folds >= 2)
    std::printf("cv_accuracy %.4f (%d folds, mean nnz %.1f, %.3f s)\n", r.cv_accuracy, t.folds,
                r.cv_mean_nnz, r.cv_time_s);
  std::printf("time        %.3f s (after %.3f s for the workers to join)\n", r.fit.time_s,
              r.join_s);
  if (!t.model.empty()) std::printf("model       %s\n", t.model.c_str());
  return 0;
}

action add_svm_worker_command(CLI::App& svm) {
  struct flags {
    std::string connect, data, format = "auto", token, token_file;
    job::tls_files tls;
    int rank = -1, world = -1, threads = 0;
    double timeout_s = 60;
    bool presharded = false;
  };
  auto f = std::make_shared<flags>();
  auto* w = svm.add_subcommand(
      "worker", "One row shard of a multi-process consensus fit (svm train --procs K)");
  w->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  w->add_option("--connect", f->connect, "HOST:PORT of the consensus side")->required();
  w->add_option("--data", f->data, "Data file (LIBSVM text or CSV, label first)")->required();
  w->add_option("--format", f->format, "libsvm, csv or auto (by file name)")->capture_default_str();
  w->add_option("--rank", f->rank,
                "This worker's rank (default: RANK, OMPI_COMM_WORLD_RANK, SLURM_PROCID)");
  w->add_option("--world", f->world, "Number of workers (default: WORLD_SIZE, ...)");
  auto* token = w->add_option("--token", f->token, "Job token (default: MERAK_JOB_TOKEN)");
  w->add_option("--token-file", f->token_file,
                "Read the job token from this file (mode 0600; a token on the command line shows "
                "in ps)")
      ->excludes(token);
  w->add_flag("--presharded", f->presharded,
              "The file holds this rank's rows only (default: take rows [n R/K, n (R+1)/K))");
  w->add_option("--timeout-s", f->timeout_s,
                "Bound on reaching the consensus side; silence from it for twice this ends the "
                "worker")
      ->capture_default_str();
  w->add_option("--threads", f->threads, "Threads for the matrix products (default: all cores)");
  add_tls_flags(*w, f->tls);
  return [w, f] {
    job::bootstrap_options b;
    const endpoint e = parse_endpoint(f->connect, "--connect", false);
    b.rank = f->rank, b.world_size = f->world, b.addr = e.host, b.port = e.port;
    b.token = f->token_file.empty() ? f->token : job::read_token_file(f->token_file);
    b.tls = use_tls_flags(f->tls, "svm worker");
    b = job::resolve_bootstrap(b);
    svm::set_solver_threads(f->threads);
    svm::dataset d;
    try {
      d = svm::read_data(f->data, svm::parse_data_format(f->format, f->data));
    } catch (const std::exception& x) {
      fail("svm worker {}: {}", b.rank, x.what());
    }
    if (!f->presharded && b.world_size > d.rows())
      fail("svm worker {}: {} has {} samples, fewer than --world {}", b.rank, f->data, d.rows(),
           b.world_size);
    actors::svm_worker_process_options o;
    o.whole_file = !f->presharded;  // the worker keeps the file and takes its rows per fit
    o.host = e.host, o.port = uint16_t(e.port);
    o.rank = b.rank, o.world = b.world_size, o.token = b.token, o.tls = b.tls;
    o.timeout = timeout_ms(f->timeout_s, "--timeout-s");
    actors::run_svm_worker_process(std::move(d), o);
    (void)w;
    return 0;
  };
}

}  // namespace merak::apps
