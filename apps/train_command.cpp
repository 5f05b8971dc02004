// `merak train`: single-device GPT training (the reference run).
#include <fcntl.h>
#include <unistd.h>

#include <spdlog/spdlog.h>
#include <CLI/CLI.hpp>

#include <nlohmann/json.hpp>

#include <fmt/ranges.h>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "actors/auto_plan.hpp"
#include "actors/parallel_trainer.hpp"
#include "apps/commands.hpp"
#include "apps/device_flag.hpp"
#include "apps/flag_checks.hpp"
#include "apps/megatron_train_flags.hpp"
#include "apps/memory_flags.hpp"
#include "apps/pipeline_flags.hpp"
#include "apps/model_flags.hpp"
#include "apps/plan_output.hpp"
#include "apps/version.hpp"
#include "core/checksum.hpp"
#include "core/error.hpp"
#include "core/files.hpp"
#include "job/bootstrap.hpp"
#include "job/identity.hpp"
#include "job/openmp_spin.hpp"
#include "model/gemm.hpp"
#include "model/trainer.hpp"
#include "partition/placement.hpp"

namespace merak::apps {
namespace {

struct train_flags {
  model::train_options opts;
  actors::parallel_options par;
  std::string schedule = "1f1b";
  bool schedule_given = false;  // --schedule on the command line
  int chunks = 0;  // 0: 2 with --schedule interleaved, else 1
  virtual_pipeline_flags virtual_pipeline;  // Megatron's names for interleaved and its chunks
  megatron_train_flags megatron;            // Megatron's schedule, optimizer and run flags
  bool vocab_given = false;                 // --vocab on the command line
  std::string recompute = "none";
  std::string metrics;
  int threads = 0;
  std::string gemm;
  std::string precision = "fp32";
  std::string device = "cpu";
  int64_t eval_interval = 0;
  double bucket_mb = 4;
  int devices = 0;  // > 0: plan dp/tp/pp automatically
  std::string sparse_reducer = "none";
  std::string error_feedback = "off";
  std::string tokenizer = "bytes";
  bool untied_head = false;
  model_family_flags family;  // --model and the Llama family's flags
  bool dp_given = false;      // --dp on the command line (else derived from the processes)
  int micro_batch_size = 0;   // > 0: Megatron's --micro-batch-size, a size, not a count
  memory_flags memory;  // sharding, sequence parallelism, Megatron's recomputation names
  // --overwrite: a run already in --save is removed, this one starts over.
  bool overwrite = false;
};

// Appends one JSON object per line; flushed per line so a crash loses nothing.
class metrics_writer {
 public:
  // `resumed_at` >= 0: a run resumed from the checkpoint of that step keeps
  // the file's lines up to it and drops later ones (steps that a failed run
  // took after its last checkpoint, which this run takes again).
  metrics_writer(const std::string& path, int64_t resumed_at) : path_(path) {
    if (path.empty()) return;
    if (resumed_at >= 0) keep_through(path, resumed_at);
    out_.open(path, resumed_at >= 0 ? std::ios::app : std::ios::trunc);
    if (!out_) fail("cannot open metrics file '{}' for writing", path);
  }
  // A line that cannot be written (a full disk) stops the run, naming the file.
  void write(const nlohmann::json& j) {
    if (!out_.is_open()) return;
    out_ << j.dump() << '\n' << std::flush;
    if (!out_) fail("cannot write metrics file '{}': {}", path_, std::strerror(errno));
  }

 private:
  static void keep_through(const std::string& path, int64_t step) {
    check_output_file(path, "metrics file");  // it is read, then replaced
    std::ifstream in(path);
    if (!in) return;  // a new file
    std::string kept, line;
    bool dropped = false;
    while (std::getline(in, line)) {
      auto j = nlohmann::json::parse(line, nullptr, false);
      // A line cut short by the failure, or one past the checkpoint, goes.
      if (j.is_discarded() || !j.is_object() || !j.contains("step") || !j["step"].is_number() ||
          j["step"].get<int64_t>() > step) {
        dropped = true;
        continue;
      }
      kept += line + '\n';
    }
    if (!dropped) return;
    const std::string tmp = path + ".resume";
    {
      std::ofstream out(tmp, std::ios::trunc);
      out << kept;
      if (!out.flush()) fail("cannot rewrite metrics file '{}' (through '{}')", path, tmp);
    }
    if (std::rename(tmp.c_str(), path.c_str()) != 0)
      fail("cannot replace metrics file '{}': {}", path, std::strerror(errno));
  }
  std::string path_;
  std::ofstream out_;
};

// --devices N: the planner chooses dp x tp x pp, micro-batches, schedule,
// recomputation and TP overlap for N actor devices sharing this machine's
// cores, and the run uses its choice (in a job of several processes,
// process 0 plans and every process runs its choice and placement).
void plan_devices(train_flags& f) {
  auto& p = f.par;
  if (p.dp != 1 || p.tp != 1 || p.pp != 1 || p.micro_batches != 1)
    fail(
        "--devices {} plans dp/tp/pp and micro-batches itself: drop --dp/--tp/--pp/--micro-batches",
        f.devices);
  p.threads = f.threads;
  auto plan = actors::plan_for_devices(f.opts, f.devices, p);
  if (!p.processes || p.processes->rank() == 0) {
    partition::plan_request r;
    r.model = f.opts.model;
    r.global_batch = f.opts.batch;
    r.devices = f.devices;
    r.device = partition::find_device("cpu");
    print_plan(r, plan.search, stderr);
  }
  p = plan.options;
  f.schedule = std::string(partition::schedule_name(p.schedule));
}

// The multi-process job this process belongs to, when a launcher says so
// (merak launch, torchrun-style RANK / WORLD_SIZE, mpirun, Slurm) and the
// job has more than one process; null otherwise. Joins it (a collective).
std::shared_ptr<job::bootstrap> join_job() {
  bool launched = false;
  for (const char* v : {"WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "SLURM_NTASKS"})
    if (const char* x = std::getenv(v); x && std::string(x) != "1") launched = true;
  if (!launched) return nullptr;
  auto o = job::resolve_bootstrap({});
  if (o.world_size <= 1) return nullptr;
  if (o.rank == 0)
    spdlog::info("rank 0 of {} listens on {}:{} (rendezvous {}, from {})", o.world_size,
                 o.bind_addr, o.port, o.addr, o.found_by);
  return job::connect_bootstrap(o);
}

// Creates `dir` (and its parents) if needed and checks that a file can be
// created and written in it; fails naming `flag` and the reason.
void probe_writable_dir(const std::string& dir, const char* flag) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) fail("{} '{}': cannot create the directory: {}", flag, dir, ec.message());
  const std::string probe =
      (std::filesystem::path(dir) / fmt::format(".merak-probe-{}", ::getpid())).string();
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) fail("{} '{}' is not writable: {}", flag, dir, std::strerror(errno));
  const bool wrote = ::write(fd, "x", 1) == 1;
  const int err = errno;
  ::close(fd);
  ::unlink(probe.c_str());
  if (!wrote) fail("{} '{}' is not writable: {}", flag, dir, std::strerror(err));
}

// A new run never silently replaces another in its --save directory. With
// a run there (model::describe_run) this run resumes it (--load of that
// directory or of a checkpoint in it), or with --overwrite removes it and
// starts over, or is refused naming the directory and what it holds.
void claim_save_directory(const train_flags& f) {
  const std::string& save = f.opts.save_dir;
  const std::string& load = f.opts.load;
  if (save.empty()) {
    if (f.overwrite) fail("--overwrite needs --save (it starts the run in that directory over)");
    return;
  }
  const bool resumes = !load.empty() && model::part_of_run(load, save);
  if (f.overwrite && resumes)
    fail("--overwrite starts the run in --save '{}' over but --load '{}' resumes it: drop one",
         save, load);
  const std::string held = model::describe_run(save);
  if (held.empty() || resumes) return;
  if (f.overwrite) {
    model::remove_run(save);
    spdlog::warn("--overwrite: removed the run that --save '{}' held ({}); this run starts over",
                 save, held);
    return;
  }
  if (load.empty())
    fail(
        "--save '{}' already holds a run ({}): resume it with --load {}, or pass --overwrite to "
        "start over",
        save, held, save);
  fail(
      "--save '{}' already holds a run ({}) that --load '{}' is not part of: save into a new "
      "directory, or pass --overwrite to replace it",
      save, held, load);
}

// Runs the step loop of a training job (single-device or actor runtime).
// In a multi-process job only rank 0 writes metrics and checkpoints.
int train_loop(train_flags& f, model::training_job& tr) {
  const bool lead = tr.writes_outputs();
  metrics_writer metrics(lead ? f.metrics : std::string(),
                         f.opts.load.empty() ? int64_t(-1) : int64_t(tr.step()));
  const bool tty = lead && ::isatty(STDERR_FILENO);
  const int64_t log_every = f.megatron.log_interval > 0 ? f.megatron.log_interval
                                                         : std::max<int64_t>(1, f.opts.steps / 20);
  constexpr int kmax_skipped_in_a_row = 10;
  int skipped_in_a_row = 0;
  while (!tr.done()) {
    auto r = tr.train_step();
    // Stop before a diverged step reaches the metrics or a checkpoint, or
    // (--skip-nonfinite) note the step that left the weights as they were.
    const bool finite = std::isfinite(r.loss) && std::isfinite(r.grad_norm);
    if (!finite && !r.skipped)
      fail(
          "step {}: the loss is {} and the gradient norm {}; training diverged (try a lower --lr "
          "or --grad-clip, or --skip-nonfinite); nothing of this step was saved",
          r.step, r.loss, r.grad_norm);
    skipped_in_a_row = r.skipped ? skipped_in_a_row + 1 : 0;
    if (r.skipped && lead)
      spdlog::warn("step {}: the loss is {} and the gradient norm {}: skipped (weights unchanged)",
                   r.step, r.loss, r.grad_norm);
    if (skipped_in_a_row >= kmax_skipped_in_a_row)
      fail(
          "steps {}-{} were all skipped (a non-finite loss or gradient norm {} times in a row): "
          "training diverged (try a lower --lr or --grad-clip)",
          r.step - kmax_skipped_in_a_row + 1, r.step, kmax_skipped_in_a_row);
    // JSON has no NaN: a skipped step's values are written as null.
    auto number = [](double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(); };
    const double now_s =
        std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    nlohmann::json line{{"step", r.step},
                        {"time", std::round(now_s * 1000) / 1000},
                        {"loss", number(r.loss)},
                        {"lr", r.lr},
                        {"tokens_per_s", r.tokens_per_s},
                        {"step_s", r.step_s},
                        {"grad_norm", number(r.grad_norm)}};
    if (r.skipped) line["skipped"] = true;
    for (auto& [name, value] : tr.step_metrics()) {
      // "group/key" nests: {"group": {"key": value}}.
      const auto slash = name.find('/');
      auto& at = slash == std::string::npos ? line[name]
                                            : line[name.substr(0, slash)][name.substr(slash + 1)];
      if (std::isfinite(value) && value == std::trunc(value) && std::abs(value) < 0x1p53)
        at = int64_t(value);  // counts stay integers in the JSON
      else
        at = value;
    }
    bool eval = tr.done() || (f.eval_interval > 0 && r.step % f.eval_interval == 0);
    if (eval) line["val_loss"] = tr.validation_loss();
    metrics.write(line);
    if (tty) {
      std::fprintf(stderr, "\rstep %lld/%lld  loss %.4f  lr %.2e  %.0f tok/s%s", (long long)r.step,
                   (long long)f.opts.steps, r.loss, r.lr, r.tokens_per_s, eval ? "" : "   ");
      if (eval) std::fprintf(stderr, "  val %.4f\n", line["val_loss"].get<double>());
    } else if (lead && (eval || r.step % log_every == 0)) {
      spdlog::info("step {}/{} loss {:.4f} lr {:.2e} {:.0f} tok/s{}", r.step, f.opts.steps, r.loss,
                   r.lr, r.tokens_per_s,
                   eval ? fmt::format(" val_loss {:.4f}", line["val_loss"].get<double>()) : "");
    }
    if (lead && tr.checkpoint_due()) spdlog::info("saved checkpoint {}", tr.save());
  }
  return 0;
}

// --model and Megatron's switches into f.opts.model (apps/model_flags).
void apply_model_family(train_flags& f) {
  apply_model_family(f.family, f.opts.model);
}

// The run's flags as a TOML config file that `merak train --config FILE`
// reads back: every flag given (on the command line or in a config file),
// and the defaults of the others except those a given flag excludes.
std::string resolved_config(const CLI::App& c) {
  static const std::regex number(R"([+-]?[0-9]+(\.[0-9]+)?([eE][+-]?[0-9]+)?)");
  auto toml_value = [](const std::string& v) {
    if (std::regex_match(v, number) || v == "true" || v == "false") return v;
    std::string q = "\"";
    for (char ch : v) q += ch == '"' || ch == '\\' ? std::string("\\") + ch : std::string(1, ch);
    return q + "\"";
  };
  std::string version = version_text();
  std::string out =
      "# merak train: the flags of this run; merak train --config FILE runs it again\n";
  out += "# " + version.substr(0, version.find('\n')) + "\n";
  for (const CLI::Option* o : c.get_options()) {
    const std::string name = o->get_single_name();
    // --overwrite acts once, on the directory as it was: running the file
    // again must not remove the run it started.
    if (name == "help" || name == "config" || name == "overwrite" || o->get_lnames().empty())
      continue;
    std::vector<std::string> values;
    if (o->count() > 0) {
      values = o->results();
    } else {
      if (o->get_default_str().empty()) continue;
      bool excluded = false;
      for (const CLI::Option* x : o->get_excludes()) excluded |= x->count() > 0;
      if (excluded) continue;
      values = {o->get_default_str()};
    }
    if (values.empty()) continue;
    if (o->get_expected_max() == 0) values = {values.back() == "false" ? "false" : "true"};
    out += o->get_lnames().front() + " = ";
    if (values.size() == 1 || o->get_items_expected_max() <= 1) {
      out += toml_value(values.back()) + "\n";
    } else {
      out += "[";
      for (size_t i = 0; i < values.size(); ++i) out += (i ? ", " : "") + toml_value(values[i]);
      out += "]\n";
    }
  }
  return out;
}

// What identifies a file's contents between hosts without reading all of
// it: its size and the CRC-32C of its first and last MiB.
std::string contents_of(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return "not a regular file here";
  const auto size = std::filesystem::file_size(path, ec);
  std::ifstream in(path, std::ios::binary);
  if (ec || !in) return "unreadable here";
  constexpr uint64_t kmib = 1 << 20;
  std::string head(std::min<uint64_t>(size, kmib), '\0'), tail;
  in.read(head.data(), std::streamsize(head.size()));
  if (size > kmib) {
    tail.resize(std::min<uint64_t>(size - kmib, kmib));
    in.seekg(std::streamoff(size - tail.size()));
    in.read(tail.data(), std::streamsize(tail.size()));
  }
  if (!in) return "unreadable here";
  const uint32_t crc = crc32c(tail.data(), tail.size(), crc32c(head.data(), head.size()));
  return fmt::format("{} bytes, crc32c {:08x} of its ends", size, crc);
}

// The settings every process of a job must share (job/identity.hpp): the
// run's resolved flags without those that concern one process only, with
// the data named by its contents rather than its path (hosts may mount it
// elsewhere).
job::job_settings job_settings_of(const CLI::App& c, const train_flags& f) {
  static const std::set<std::string> local = {
      "data",      "data-path",   "metrics",      "threads",    "gemm",     "trace",
      "log-level", "step-timeout", "heartbeat-timeout", "idle-spin-us", "lend-cores"};
  job::job_settings out;
  std::istringstream lines(resolved_config(c));
  for (std::string l; std::getline(lines, l);) {
    const size_t eq = l.find(" = ");
    if (l.empty() || l[0] == '#' || eq == std::string::npos) continue;
    const std::string name = l.substr(0, eq);
    if (!local.count(name)) out.push_back({"--" + name, l.substr(eq + 3)});
  }
  if (!f.opts.data.empty()) out.push_back({"--data (contents)", contents_of(f.opts.data)});
  for (size_t i = 0; i < f.opts.data_path.size(); ++i) {
    const std::string& p = f.opts.data_path[i];
    const std::string name = fmt::format("--data-path entry {}", i + 1);
    char* end = nullptr;
    std::strtod(p.c_str(), &end);
    if (!p.empty() && *end == '\0')  // a weight
      out.push_back({name, p});
    else if (std::filesystem::exists(p + ".idx"))
      out.push_back({name + " (contents)", contents_of(p + ".idx") + "; " + contents_of(p + ".bin")});
    else
      out.push_back({name + " (contents)", contents_of(p)});
  }
  return out;
}

int run_train(train_flags& f, const CLI::App& c) {
  // Processes sharing this host share its cores (job/openmp_spin.hpp).
  if (f.threads == 0) {
    const auto get = [](const char* name) { return static_cast<const char*>(std::getenv(name)); };
    const int n = job::processes_on_host(get);
    if (n > 1) f.threads = std::max(1, int(std::thread::hardware_concurrency()) / n);
  }
  const int most_threads = 8 * std::max(1, int(std::thread::hardware_concurrency()));
  if (f.threads < 0 || f.threads > most_threads)
    fail("--threads must be from 0 (every core) to {}, 8 per core (got {})", most_threads,
         f.threads);
  if (f.threads > 0) model::set_compute_threads(f.threads);
  if (!f.gemm.empty()) model::set_gemm_backend(model::parse_gemm_backend(f.gemm));
  if (f.eval_interval < 0) fail("--eval-interval must not be negative (got {})", f.eval_interval);
  f.par.schedule = partition::parse_schedule(f.schedule);
  if (const int v = virtual_pipeline_chunks(f.virtual_pipeline, f.opts.model.layers, f.par.pp);
      v > 0) {
    if (f.schedule_given && f.par.schedule != partition::schedule_kind::interleaved)
      fail("Megatron-LM's virtual pipeline flags run the interleaved schedule: drop --schedule {}",
           f.schedule);
    if (f.chunks > 0 && f.chunks != v)
      fail("--chunks {} contradicts the virtual pipeline flags' {} chunks a stage", f.chunks, v);
    f.par.schedule = partition::schedule_kind::interleaved;
    f.chunks = v;
  }
  f.par.chunks = f.chunks > 0                                              ? f.chunks
                 : f.par.schedule == partition::schedule_kind::interleaved ? 2
                                                                           : 1;
  const std::string recompute = recompute_of(f.memory, f.recompute);
  f.par.recompute = partition::parse_recompute_kind(recompute);
  f.par.recompute_layers = recompute_layers_of(f.memory, recompute);
  f.par.sharding = sharding_of(f.memory);
  f.par.sequence_parallel = f.memory.sequence_parallel;
  f.par.overlap_param_gather = f.memory.overlap_param_gather;
  f.par.threads = f.threads;
  // Bounded so that the byte count fits an int64 with room to spare.
  constexpr double kmost_bucket_mb = 1048576;
  if (!(f.bucket_mb > 0 && f.bucket_mb <= kmost_bucket_mb))
    fail("--bucket-mb must be a positive number up to {} (got {})", kmost_bucket_mb, f.bucket_mb);
  f.par.bucket_bytes = int64_t(f.bucket_mb * 1048576.0);
  f.par.sparse.kind = f.sparse_reducer == "none" ? comm::codec_kind::dense
                                                 : comm::parse_codec_kind(f.sparse_reducer);
  if (f.error_feedback == "on")
    f.par.sparse.feedback = comm::error_feedback::contractive;
  else if (f.error_feedback != "off")
    fail("--error-feedback must be on or off (got '{}')", f.error_feedback);
  f.par.sparse.seed = f.opts.seed;
  if (f.opts.data.empty() && f.opts.data_path.empty())
    fail("--data FILE or --data-path PREFIX is required");
  if (f.par.measure_sparse_error && f.sparse_reducer == "none")
    fail("--measure-sparse-error needs --sparse-reducer coo, union or s2");
  f.opts.tokens = model::parse_tokenizer(f.tokenizer);
  f.opts.model.tied_head = !f.untied_head;
  apply_megatron_train_flags(f.megatron, f.opts, f.precision, f.vocab_given);
  apply_model_family(f);
  f.opts.model.validate();  // a shape refused before config.toml is written or any allocation
  f.opts.model.activations = model::parse_precision(f.precision);
  f.opts.where = apps::enable_device(f.device);
  // "cuda": in a job of several processes each process its own GPU (that of
  // LOCAL_RANK); in one process the actors spread over the GPUs.
  if (f.device == "cuda") {
    if (const char* lr = std::getenv("LOCAL_RANK"))
      f.opts.where.index = std::atoi(lr);
    else
      f.par.spread_over_devices = true;
  }
  f.par.processes = join_job();
  // Before anything is written or trained: every rank started alike.
  if (f.par.processes) job::agree_on_settings(*f.par.processes, job_settings_of(c, f));
  if (!f.par.processes || f.par.processes->rank() == 0) {
    claim_save_directory(f);
    // Found now, not at the first save or the first metrics line.
    if (!f.opts.save_dir.empty()) probe_writable_dir(f.opts.save_dir, "--save");
    if (!f.metrics.empty()) {
      const auto parent = std::filesystem::path(f.metrics).parent_path();
      if (!parent.empty()) probe_writable_dir(parent.string(), "--metrics");
    }
    // The run directory records how the run was started.
    const std::string cfg = resolved_config(c);
    if (!f.opts.save_dir.empty())
      write_file_atomic((std::filesystem::path(f.opts.save_dir) / "config.toml").string(), cfg);
    else if (!f.metrics.empty())
      write_file_atomic(f.metrics + ".config.toml", cfg);
  }
  const int world = f.par.processes ? f.par.processes->size() : 1;
  if (world > 1) {
    if (!f.dp_given && f.devices == 0) f.par.dp = partition::derive_dp(world, f.par.pp, f.par.tp);
    // Listen where the job's other hosts reach this one.
    f.par.listen_addr = f.par.processes->local_address();
  }
  if (f.sparse_reducer != "none" && f.par.dp < 2)
    fail("--sparse-reducer {} needs --dp 2 or more (it reduces across replicas)", f.sparse_reducer);
  if (f.micro_batch_size != 0)
    f.par.micro_batches =
        partition::micro_batches_for_size(f.opts.batch, f.par.dp, f.micro_batch_size, "the batch");
  if (f.opts.where.type != model::device::kind::cpu && f.devices > 0)
    fail("--device {} with --devices: the planner plans for this machine's cores (drop one)",
         f.device);
  if (f.devices > 0) plan_devices(f);
  // A job of several processes runs on the actors whatever its layout
  // (parallel_options::validate then checks --dp against the processes).
  auto job = actors::make_training_job(f.opts, f.par);
  if (job->writes_outputs()) {
    std::istringstream lines(job->describe());
    for (std::string l; std::getline(lines, l);) spdlog::info("{}", l);
  }
  return train_loop(f, *job);
}

}  // namespace

namespace {

// The model, the data, the optimizer, validation and checkpoints.
void add_model_and_training_flags(CLI::App* c, train_flags* f) {
  model::train_options& options = f->opts;
  auto* data = c->add_option("--data", options.data, "Training text file (bytes are tokens)");
  c->add_option("--data-path", options.data_path,
                "Tokenized datasets instead of --data: PREFIX of PREFIX.idx/.bin (Megatron's "
                "indexed dataset) or an llm.c .bin file, or weighted pairs W1 P1 W2 P2 ...")
      ->expected(1, -1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
      ->excludes(data);
  c->add_option("--split", options.split,
                "--data-path: train,valid,test shares of each dataset's documents")
      ->capture_default_str();
  add_model_family_flags(c, &f->family, &f->opts.model);
  c->add_option("--layers,--num-layers", options.model.layers, "Transformer blocks (L)")
      ->capture_default_str();
  c->add_option("--dim,--hidden-size", options.model.dim, "Channels (C)")->capture_default_str();
  c->add_option("--heads,--num-attention-heads", options.model.heads, "Attention heads (NH)")
      ->capture_default_str();
  c->add_option("--seq,--seq-length", options.model.max_seq, "Sequence length (T)")
      ->capture_default_str();
  c->add_option("--vocab", options.model.vocab,
                "Vocabulary size (bytes: 256; words: the hash range; --data-path: the "
                "tokenizer's, from --tokenizer-type)")
      ->capture_default_str()
      ->each([f](const std::string&) { f->vocab_given = true; });
  c->add_option("--batch,--global-batch-size", options.batch, "Global batch size (B)")
      ->capture_default_str();
  // The bound is what config.toml can hold (a TOML integer is an int64).
  integer_in(c->add_option("--steps,--train-iters", options.steps, "Total optimizer steps"), 0,
             INT64_MAX)
      ->capture_default_str();
  c->add_option("--lr", options.lr, "Peak learning rate")->capture_default_str();
  c->add_option("--min-lr", options.min_lr, "Final learning rate (default lr/10)");
  c->add_option("--warmup,--lr-warmup-iters", options.warmup, "Warm-up steps (default steps/20)");
  c->add_option("--weight-decay", options.weight_decay, "AdamW weight decay")
      ->capture_default_str();
  c->add_option("--grad-clip,--clip-grad", options.grad_clip, "Global gradient-norm clip (0: off)")
      ->capture_default_str();
  c->add_flag("--skip-nonfinite", options.skip_nonfinite,
              "A step with a non-finite loss or gradient norm leaves the weights and optimizer "
              "as they were and the run goes on (10 in a row end it); default: the run stops");
  // Up to int64's largest, which config.toml (TOML integers) can hold.
  integer_in(c->add_option("--seed", options.seed, "Random seed (initialisation and data order)"),
             0, INT64_MAX)
      ->capture_default_str();
  c->add_option("--val-fraction", options.val_fraction, "Share of the file held out for validation")
      ->capture_default_str();
  c->add_option("--eval-interval", f->eval_interval,
                "Steps between validation losses (0: at the end)");
  c->add_option("--eval-batches,--eval-iters", options.eval_batches,
                "Validation batches per evaluation")
      ->capture_default_str();
  c->add_option("--save", options.save_dir,
                "Directory for checkpoints (one sub-directory per step); one that holds a run "
                "is refused unless --load resumes it or --overwrite is given");
  c->add_flag("--overwrite", f->overwrite,
              "Remove the run that --save holds (latest, checkpoints, config.toml) and start "
              "over");
  c->add_option("--save-interval", options.save_interval,
                "Steps between checkpoints (0: only at the end)");
  c->add_option("--load", options.load,
                "Resume from a run directory (latest) or a checkpoint directory; --load of the "
                "--save directory starts at step 0 while it holds no checkpoint yet");
}

// Metrics, threads, GEMM backend, device and precision.
void add_run_flags(CLI::App* c, train_flags* f) {
  c->add_option("--metrics", f->metrics, "Write one JSON line per step to this file");
  c->add_option("--threads", f->threads, "Compute threads (default: all cores)");
  c->add_option("--gemm", f->gemm, "GEMM backend: onednn, openblas or eigen");
  c->add_option("--device", f->device,
                "cpu, cuda or cuda:N (cuda: one process's actors spread over its GPUs; in a "
                "job of several processes, the GPU of LOCAL_RANK)")
      ->capture_default_str();
  c->add_option("--precision", f->precision,
                "fp32, or bf16: bf16 activations and GEMMs with float accumulation, float "
                "master weights, optimizer state, statistics and loss")
      ->capture_default_str();
}

// The parallel layout, its planner, schedule, recomputation and runtime.
void add_layout_flags(CLI::App* c, const std::shared_ptr<train_flags>& f) {
  c->add_option("--dp", f->par.dp,
                "Data-parallel replicas (actors; in a job of several processes default "
                "processes / (pp x tp) when that divides, else 1)")
      ->capture_default_str()
      ->each([f](const std::string&) { f->dp_given = true; });
  c->add_option("--placement", f->par.placement,
                "Process rank of each actor, TP rank fastest, then stage (virtual stage when "
                "interleaved), then replica (\"0,0,1,1\"); default: contiguous blocks in that "
                "order, a stage's chunks with it");
  c->add_option("--pp,--pipeline-model-parallel-size", f->par.pp, "Pipeline stages (actors)")
      ->capture_default_str();
  c->add_option("--bucket-mb", f->bucket_mb,
                "Data-parallel gradient bucket (MiB), reduced while backward goes on")
      ->capture_default_str();
  add_memory_flags(c, &f->memory, "training runs no_shard and optim (`merak plan` scores all)");
  c->add_option("--sparse-reducer", f->sparse_reducer,
                "Codec for the token embedding's gradient: none|coo|union|s2")
      ->capture_default_str();
  // The S2 flags are checked here, as they are read, not by the codec
  // inside the reducer actors (comm/codec.cpp checks the same ranges).
  number_in(c->add_option("--sketch-ratio", f->par.sparse.sketch_ratio,
                          "S2 sketch size as a fraction of the embedding's elements"),
            0, 64, true)
      ->capture_default_str();
  integer_in(
      c->add_option("--sketch-rows", f->par.sparse.sketch_rows, "S2 sketch rows (median of r)"), 1,
      32)
      ->capture_default_str();
  c->add_option("--error-feedback", f->error_feedback,
                "S2 error feedback: off|on (the contractive form)")
      ->capture_default_str();
  c->add_option("--tokenizer", f->tokenizer,
                "bytes (vocabulary 256) or words (hashed words into [0, --vocab))")
      ->capture_default_str();
  c->add_flag("--untied-head,--untie-embeddings-and-output-weights", f->untied_head,
              "LM head with its own weight, not the token embedding (a row-sparse embedding "
              "gradient)");
  c->add_flag("--measure-sparse-error", f->par.measure_sparse_error,
              "Also average the embedding gradient exactly; metrics report sparse_rel_error");
  c->add_option("--devices", f->devices,
                "Plan dp/tp/pp, micro-batches, schedule and recomputation for N actor devices")
      ->capture_default_str();
  c->add_option("--tp,--tensor-model-parallel-size", f->par.tp,
                "Tensor-parallel shards per stage (actors)")
      ->capture_default_str();
  c->add_option("--tp-overlap", f->par.tp_overlap,
                "Sub-pipelined TP: 0 off, 1 two sub-micro-batches, 2 also across blocks")
      ->capture_default_str();
  auto* micro_batches =
      c->add_option("--micro-batches", f->par.micro_batches, "Micro-batches per replica and step")
          ->capture_default_str();
  c->add_option("--micro-batch-size", f->micro_batch_size,
                "Sequences per micro-batch (Megatron's): --micro-batches = batch / (dp x this)")
      ->excludes(micro_batches);
  c->add_option("--schedule", f->schedule,
                "Pipeline schedule: gpipe, 1f1b, shifted, zb-h1 or interleaved")
      ->capture_default_str()
      ->each([f](const std::string&) { f->schedule_given = true; });
  integer_in(c->add_option("--chunks", f->chunks,
                           "Interleaved: model chunks per pipeline stage (virtual stages = pp x "
                           "this; default 2)"),
             1, 64);
  add_virtual_pipeline_flags(c, &f->virtual_pipeline);
  c->add_option("--recompute", f->recompute,
                "Recomputation: none, full, stage-aware or selective (the attention cores only)")
      ->capture_default_str();
  c->add_option("--recompute-ratio", f->par.recompute_ratio,
                "Stage-aware: share of stage 0's layers recomputed (later stages less)")
      ->capture_default_str();
  integer_in(c->add_option("--memory-budget", f->par.memory_budget,
                           "Bytes per stage; stage-aware recomputation picks the least that fits "
                           "(0: no limit)"),
             0, INT64_MAX);
  c->add_option("--trace", f->par.trace_path, "Write a Chrome-trace JSON of the last step");
  number_in(c->add_option("--step-timeout", f->par.timeout_s,
                          "Seconds any actor may stay silent before the run fails"),
            0, kmost_seconds, true)
      ->capture_default_str();
  number_in(c->add_option("--heartbeat-timeout", f->par.heartbeat_s,
                          "In a job of several processes: seconds a process may answer no "
                          "heartbeat (stopped, hung) before the job fails naming it; 0: off"),
            0.2, 1e6, false, "off")
      ->capture_default_str();
  integer_in(c->add_option("--idle-spin-us", f->par.idle_spin_us,
                           "An idle stage polls this long for its next message before blocking; "
                           "-1: automatic (200 when the stages fit on the cores, else 0)"),
             -1, 1000000)
      ->capture_default_str();
  c->add_option("--shared-rings", f->par.shared_rings,
                "In a job of several processes: stages on one host pass tensors through "
                "shared memory; off: over UCX alone")
      ->capture_default_str();
  c->add_option("--lend-cores", f->par.lend_cores,
                "A stage computing while others idle borrows their cores for the op "
                "(pipeline fill and drain); off for bit-for-bit repeatable runs")
      ->capture_default_str();
}

}  // namespace

action add_train_command(CLI::App& parent) {
  auto f = std::make_shared<train_flags>();
  auto* c = parent.add_subcommand("train",
                                  "Train a GPT or Llama model: on one device, or dp x tp x pp on "
                                  "actors (--devices N plans it)");
  c->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  c->add_option("--config", "TOML or JSON file with the same keys as these flags");
  add_model_and_training_flags(c, f.get());
  add_megatron_train_flags(c, &f->megatron, &f->opts);
  add_run_flags(c, f.get());
  add_layout_flags(c, f);
  return [f, c] { return run_train(*f, *c); };
}

}  // namespace merak::apps
