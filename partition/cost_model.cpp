#include "partition/cost_model.hpp"

#include <spdlog/spdlog.h>

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/rng.hpp"
#include "model/adamw.hpp"
#include "model/executor.hpp"

namespace merak::partition {
namespace {

bool is_matmul(const model::node_info& n) {
  return n.kind == "linear" || n.kind == "attention";
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

class analytic final : public cost_model {
 public:
  // `seq` and `head_dim` (0: unknown) give attention its GEMM shapes.
  analytic(device_spec d, int seq, int head_dim, attention_kernel attention)
      : d_(std::move(d)), seq_(seq), head_dim_(head_dim), attention_(attention) {}
  node_time time(const model::node_info& n, int64_t tokens) const override {
    node_time t;
    const int eb = d_.activation_bytes;
    const double stream_bw = d_.memory_bw * d_.memory_efficiency;
    if (n.kind == "linear" && !n.params.empty() && n.params[0].shape.size() == 2) {
      // y (tokens x OC) = x (tokens x C) W^T; backward: dx and dW.
      const double oc = double(n.params[0].shape[0]), c = double(n.params[0].shape[1]);
      const double m = double(tokens);
      t.forward_s = gemm_seconds(d_, m, oc, c, 1, eb);
      t.weight_s = gemm_seconds(d_, c, oc, m, 1, eb);  // dW = dY^T X
      t.backward_s = gemm_seconds(d_, m, c, oc, 1, eb) + t.weight_s;
      return t;
    }
    if (n.kind == "attention" && seq_ > 0 && head_dim_ > 0) {
      // Per sequence and head: S = Q K^T and O = P V (attention_kernel).
      const double T = seq_, rows = double(tokens) / T;
      const double c_shard = n.flops_per_token / (2.0 * (T + 1));  // see causal_attention
      const double heads = std::max(1.0, std::round(c_shard / head_dim_));
      const double batch = rows * heads;
      if (attention_is_fused(attention_)) {
        // The kernel's own share of peak (device_spec::attention_efficiency),
        // halved for the first generation.
        const double slower = (d_.attention_efficiency > 0
                                   ? d_.matmul_efficiency / d_.attention_efficiency
                                   : 1.0) *
                              (attention_ == attention_kernel::fused_v1 ? 2.0 : 1.0);
        const double gemm = 0.5 * 2 * gemm_compute_seconds(d_, T, T, head_dim_, batch) * slower;
        t.forward_s = gemm + d_.launch_s;
        t.backward_s = 2.5 * gemm + d_.launch_s;
      } else {
        const double gemm = 2 * gemm_compute_seconds(d_, T, T, head_dim_, batch);
        const double pass = T * T * batch * 2 / stream_bw;  // one pass over a T x T tensor
        t.forward_s = gemm + 6.5 * pass + 4 * d_.launch_s;
        t.backward_s = 2 * gemm + 9.5 * pass + 6 * d_.launch_s;
      }
      return t;
    }
    if (is_matmul(n)) {
      t.forward_s = n.flops_per_token * double(tokens) / (d_.peak_flops * d_.matmul_efficiency);
    } else {
      // Read the input, write the output (activation bytes per token).
      t.forward_s = 2.0 * double(n.activation_bytes_per_token) * double(eb) / 4.0 * double(tokens) /
                        stream_bw +
                    d_.launch_s;
    }
    t.backward_s = (n.params.empty() && !is_matmul(n) ? 1.0 : 2.0) * t.forward_s;
    if (n.kind == "attention") t.backward_s = 2.5 * t.forward_s;  // recomputes scores
    return t;
  }
  double peak_flops() const override { return d_.peak_flops; }
  // Reads and writes parameter, gradient and two moments (28 bytes each).
  double optimizer_s(double params) const override {
    return params * 28.0 / (d_.memory_bw * d_.memory_efficiency);
  }

 private:
  device_spec d_;
  int seq_ = 0, head_dim_ = 0;
  attention_kernel attention_;
};

// Profiles by row count, measured on demand (or given).
class measured final : public cost_model {
 public:
  measured(model::gpt_config cfg, int threads, int cores, int64_t nominal_rows,
           std::string cache_file)
      : cfg_(std::move(cfg)),
        threads_(threads),
        cores_(cores),
        nominal_rows_(nominal_rows),
        cache_file_(std::move(cache_file)),
        on_demand_(true) {}
  measured(std::vector<cpu_profile> given, int max_seq, int cores) : cores_(cores) {
    MERAK_CHECK(!given.empty(), "no CPU profiles");
    cfg_.max_seq = max_seq;
    threads_ = given.front().threads;
    nominal_rows_ = given.front().rows;
    for (auto& p : given) profiles_[p.rows] = std::move(p);
  }
  node_time time(const model::node_info& n, int64_t tokens) const override {
    const cpu_profile& p = at(tokens);
    auto it = p.seconds_per_flop.find(n.kind);
    if (it == p.seconds_per_flop.end()) it = p.seconds_per_flop.find("residual");
    auto rate = it != p.seconds_per_flop.end() ? it->second : std::pair{1e-9, 1e-9};
    // TP helper nodes have no FLOPs: a copy of the activation.
    double flops =
        n.flops_per_token > 0 ? n.flops_per_token : double(n.activation_bytes_per_token) / 4.0;
    double f = flops * double(tokens);
    node_time t{f * rate.first, f * rate.second};
    // A linear layer's backward is two GEMMs of its forward's size: dX and
    // the weight gradient dW (what a split backward defers).
    if (n.kind == "linear") t.weight_s = 0.5 * t.backward_s;
    return t;
  }
  // Over every micro-batch shape profiled so far (each plan's own among them).
  double peak_flops() const override {
    double peak = peak_flops_of(at(nominal_rows_ * cfg_.max_seq));
    for (const auto& [rows, p] : profiles_) peak = std::max(peak, peak_flops_of(p));
    return peak;
  }
  double optimizer_s(double params) const override {
    return params * at(nominal_rows_ * cfg_.max_seq).optimizer_s_per_param;
  }
  sharing_model sharing(int64_t tokens) const override {
    return {cores_, threads_, std::max(1.0, at(tokens).contention)};
  }

 private:
  // Per-FLOP rates level off long before this: larger micro-batches take the
  // rates of this many tokens' rows, so profiling stays a few seconds and
  // within memory whatever batch a plan is asked for.
  static constexpr int64_t kmax_profiled_tokens = 8192;

  const cpu_profile& at(int64_t tokens) const {
    int64_t rows = std::max<int64_t>(1, tokens / std::max(1, cfg_.max_seq));
    if (on_demand_)
      rows = std::min(rows, std::max<int64_t>(1, kmax_profiled_tokens / std::max(1, cfg_.max_seq)));
    if (auto it = profiles_.find(rows); it != profiles_.end()) return it->second;
    if (on_demand_) return profiles_[rows] = profile_cpu(cfg_, rows, threads_, cores_, cache_file_);
    // The nearest profiled shape (in log rows).
    const cpu_profile* best = nullptr;
    double d = 0;
    for (auto& [r, p] : profiles_) {
      double x = std::abs(std::log(double(r)) - std::log(double(rows)));
      if (!best || x < d) best = &p, d = x;
    }
    return *best;
  }

  model::gpt_config cfg_;
  int threads_ = 1, cores_ = 0;
  int64_t nominal_rows_ = 1;
  std::string cache_file_;
  bool on_demand_ = false;
  mutable std::map<int64_t, cpu_profile> profiles_;
};

std::string cpu_name() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown cpu";
}

// Per-kind forward and backward seconds of one pass and the pass's wall
// time, each the least over `reps` passes after two warm-up passes (the
// least is what the op costs; a longer pass met another process).
struct pass_times {
  std::map<std::string, model::executor::kind_time> kinds;
  double wall_s = 0;
};

pass_times run_passes(const model::gpt_config& cfg, int64_t rows, int threads, int reps) {
  model::graph g = model::build_model(cfg);
  model::parameter_store store(1);
  model::executor ex(g, store);
  ex.set_profiling(true);
  omp_set_num_threads(threads);
  // Between passes, what a training step does between them (the optimizer
  // and fresh gradients), so that buffers come and go as they do in a run.
  model::adamw opt({}, store.all());
  auto between = [&] {
    opt.step(1e-4f);
    store.zero_grads();
  };
  auto inputs = [&] {
    std::vector<model::tensor> in;
    for (int k = 0; k < 2; ++k) {
      model::tensor t({rows, cfg.max_seq}, model::dtype::i32);
      rng r(7, uint64_t(k));
      for (int64_t i = 0; i < t.numel(); ++i) t.data<int32_t>()[i] = int32_t(r.below(cfg.vocab));
      in.push_back(std::move(t));
    }
    return in;
  };
  for (int i = 0; i < 2; ++i) {  // warm-up: pools, caches, page faults
    ex.forward(0, inputs());
    ex.backward(0, {});
    between();
  }
  pass_times out;
  for (int i = 0; i < reps; ++i) {
    auto before = ex.profile();
    auto in = inputs();
    double t0 = now_s();
    ex.forward(0, std::move(in));
    ex.backward(0, {});
    double wall = now_s() - t0;
    between();
    out.wall_s = i == 0 ? wall : std::min(out.wall_s, wall);
    for (auto& [kind, t] : ex.profile()) {
      auto b = before.count(kind) ? before.at(kind) : model::executor::kind_time{};
      model::executor::kind_time d{t.forward_s - b.forward_s, t.backward_s - b.backward_s};
      auto [it, fresh] = out.kinds.emplace(kind, d);
      if (!fresh) {
        it->second.forward_s = std::min(it->second.forward_s, d.forward_s);
        it->second.backward_s = std::min(it->second.backward_s, d.backward_s);
      }
    }
  }
  return out;
}

double total(const pass_times& p) {
  double s = 0;
  for (auto& [k, t] : p.kinds) s += t.forward_s + t.backward_s;
  return s;
}

// Seconds per parameter of the end of a step: the gradient norm, AdamW's
// step and zeroing the gradients.
double optimizer_rate(const model::gpt_config& cfg, int threads) {
  model::graph g = model::build_model(cfg);
  model::parameter_store store(1);
  model::executor ex(g, store);  // materialises the parameters
  omp_set_num_threads(threads);
  model::adamw opt({}, store.all());
  double params = 0;
  for (auto& p : store.all()) params += double(p->value.numel());
  opt.step(1e-4f);  // warm-up: the moments' pages
  store.zero_grads();
  double best = 0;
  for (int i = 0; i < 5; ++i) {
    double t0 = now_s();
    (void)model::global_grad_norm(store.all());  // the stage's share of the norm
    opt.step(1e-4f);
    store.zero_grads();
    double t = now_s() - t0;
    best = i == 0 ? t : std::min(best, t);
  }
  return best / params;
}

}  // namespace

std::unique_ptr<cost_model> analytic_costs(const device_spec& d) {
  if (d.peak_flops <= 0 || d.memory_bw <= 0)
    fail("device '{}' has no FLOP rate or memory bandwidth for analytic costs", d.name);
  return std::make_unique<analytic>(d, 0, 0, attention_kernel::fused);
}

std::unique_ptr<cost_model> analytic_costs(const device_spec& d, const model::gpt_config& cfg,
                                           attention_kernel attention) {
  if (d.peak_flops <= 0 || d.memory_bw <= 0)
    fail("device '{}' has no FLOP rate or memory bandwidth for analytic costs", d.name);
  return std::make_unique<analytic>(d, cfg.max_seq, cfg.heads > 0 ? cfg.dim / cfg.heads : 0,
                                    attention);
}

std::string_view attention_kernel_name(attention_kernel k) {
  switch (k) {
    case attention_kernel::fused:
      return "fused";
    case attention_kernel::fused_v1:
      return "fused-v1";
    case attention_kernel::unfused:
      return "unfused";
  }
  return "unfused";
}

attention_kernel parse_attention_kernel(std::string_view name) {
  for (auto k : {attention_kernel::fused, attention_kernel::fused_v1, attention_kernel::unfused})
    if (name == attention_kernel_name(k)) return k;
  fail("unknown attention kernel '{}' (fused, fused-v1 or unfused)", name);
}

bool attention_is_fused(attention_kernel k) { return k != attention_kernel::unfused; }

std::unique_ptr<cost_model> measured_costs(const model::gpt_config& cfg, int threads, int cores,
                                           int64_t nominal_rows, std::string cache_file) {
  return std::make_unique<measured>(cfg, std::max(1, threads), std::max(1, cores),
                                    std::max<int64_t>(1, nominal_rows), std::move(cache_file));
}

double peak_flops_of(const cpu_profile& p) {
  double peak = p.matmul_flops;
  for (const auto& [kind, r] : p.seconds_per_flop) {
    if (r.first > 0) peak = std::max(peak, 1.0 / r.first);
    if (r.second > 0) peak = std::max(peak, 2.0 / r.second);
  }
  return peak;
}

std::unique_ptr<cost_model> measured_costs(std::vector<cpu_profile> profiles, int max_seq,
                                           int cores) {
  return std::make_unique<measured>(std::move(profiles), max_seq, cores);
}

cpu_profile profile_cpu(const model::gpt_config& full, int64_t rows, int threads, int cores,
                        const std::string& cache_file) {
  model::gpt_config cfg = full;
  cfg.layers = std::min(cfg.layers, 2);
  threads = std::max(1, threads);
  cores = std::max(1, cores);
  const std::string key = fmt::format("{}|{}|rows={}|threads={}|cores={}|v3", cpu_name(), cfg.str(),
                                      rows, threads, cores);
  nlohmann::json cache = nlohmann::json::object();
  if (!cache_file.empty() && std::filesystem::exists(cache_file)) {
    try {
      std::ifstream in(cache_file);
      in >> cache;
      if (cache.contains(key)) {
        auto& e = cache[key];
        cpu_profile p;
        p.threads = threads;
        p.rows = rows;
        p.matmul_flops = e.at("matmul_flops").get<double>();
        p.contention = e.at("contention").get<double>();
        p.optimizer_s_per_param = e.at("optimizer_s_per_param").get<double>();
        for (auto& [k, v] : e.at("seconds_per_flop").items())
          p.seconds_per_flop[k] = {v.at(0).get<double>(), v.at(1).get<double>()};
        return p;
      }
    } catch (const std::exception&) {
      cache = nlohmann::json::object();  // a damaged cache is rebuilt
    }
  }
  // A second or more of silence otherwise: say what is measured.
  spdlog::info("profiling this CPU for the planner: {} with {} rows of {} tokens, {} thread{}{}",
               cfg.str(), rows, cfg.max_seq, threads, threads == 1 ? "" : "s",
               cache_file.empty() ? "" : fmt::format(" (cached in {})", cache_file));
  const int saved = omp_get_max_threads();
  const int reps = 5;
  pass_times alone = run_passes(cfg, rows, threads, reps);
  // Every core busy: cores / threads copies at once, each on its own thread
  // (as actors are), against the lone run. Short passes are noisy: the
  // copies run at least half a second each.
  double contention = 1;
  if (int copies = cores / threads; copies > 1) {
    const int packed_reps = std::max(reps, int(std::ceil(0.5 / std::max(1e-3, alone.wall_s))));
    std::vector<pass_times> packed(static_cast<size_t>(copies));
    std::vector<std::thread> th;
    for (int c = 0; c < copies; ++c)
      th.emplace_back([&, c] { packed[size_t(c)] = run_passes(cfg, rows, threads, packed_reps); });
    for (auto& t : th) t.join();
    double sum = 0;
    for (auto& p : packed) sum += total(p);
    contention = std::max(1.0, sum / copies / total(alone));
  }
  cpu_profile p;
  p.threads = threads;
  p.rows = rows;
  p.contention = contention;
  p.optimizer_s_per_param = optimizer_rate(cfg, threads);
  omp_set_num_threads(saved);
  // Time outside the nodes' clocks (stash bookkeeping, buffers) is spread
  // over the kinds in proportion.
  const double outside = std::max(1.0, alone.wall_s / total(alone));
  model::graph g = model::build_model(cfg);
  std::map<std::string, double> flops;  // forward FLOPs per pass, by kind
  for (auto& n : g.nodes()) flops[n.kind] += n.flops_per_token * double(rows * cfg.max_seq);
  for (auto& [kind, t] : alone.kinds) {
    double f = flops[kind];
    if (f <= 0) continue;
    p.seconds_per_flop[kind] = {t.forward_s * outside / f, t.backward_s * outside / f};
  }
  if (p.seconds_per_flop.count("linear")) p.matmul_flops = 1.0 / p.seconds_per_flop["linear"].first;
  if (!cache_file.empty()) {
    nlohmann::json e;
    e["matmul_flops"] = p.matmul_flops;
    e["contention"] = p.contention;
    e["optimizer_s_per_param"] = p.optimizer_s_per_param;
    for (auto& [k, v] : p.seconds_per_flop) e["seconds_per_flop"][k] = {v.first, v.second};
    cache[key] = e;
    std::error_code ec;
    std::filesystem::create_directories(std::filesystem::path(cache_file).parent_path(), ec);
    std::ofstream out(cache_file + ".tmp", std::ios::trunc);
    out << cache.dump(1) << '\n';
    out.close();
    if (out) std::filesystem::rename(cache_file + ".tmp", cache_file, ec);
  }
  return p;
}

}  // namespace merak::partition
