#include "partition/cost_model.hpp"

#include <omp.h>

#include <chrono>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/rng.hpp"
#include "model/executor.hpp"

namespace merak::partition {
namespace {

bool is_matmul(const model::node_info& n) {
  return n.kind == "linear" || n.kind == "attention";
}

class analytic final : public cost_model {
 public:
  explicit analytic(device_spec d) : d_(std::move(d)) {}
  node_time time(const model::node_info& n, int64_t tokens) const override {
    node_time t;
    if (is_matmul(n)) {
      t.forward_s = n.flops_per_token * double(tokens) / (d_.peak_flops * d_.matmul_efficiency);
    } else {
      // Read the input, write the output (activation bytes per token).
      t.forward_s = 2.0 * double(n.activation_bytes_per_token) * double(d_.activation_bytes) / 4.0 *
                    double(tokens) / d_.memory_bw;
    }
    t.backward_s = (n.params.empty() && !is_matmul(n) ? 1.0 : 2.0) * t.forward_s;
    if (n.kind == "attention") t.backward_s = 2.5 * t.forward_s;  // recomputes scores
    return t;
  }
  double peak_flops() const override { return d_.peak_flops; }

 private:
  device_spec d_;
};

class measured final : public cost_model {
 public:
  measured(cpu_profile p, double slowdown) : p_(std::move(p)), slowdown_(slowdown) {
    auto it = p_.seconds_per_flop.find("residual");
    fallback_ = it != p_.seconds_per_flop.end() ? it->second : std::pair{1e-9, 1e-9};
  }
  node_time time(const model::node_info& n, int64_t tokens) const override {
    auto it = p_.seconds_per_flop.find(n.kind);
    auto rate = it != p_.seconds_per_flop.end() ? it->second : fallback_;
    // TP helper nodes have no FLOPs: a copy of the activation.
    double flops =
        n.flops_per_token > 0 ? n.flops_per_token : double(n.activation_bytes_per_token) / 4.0;
    double f = flops * double(tokens);
    return {f * rate.first * slowdown_, f * rate.second * slowdown_};
  }
  double peak_flops() const override { return p_.matmul_flops; }

 private:
  cpu_profile p_;
  double slowdown_;
  std::pair<double, double> fallback_;
};

std::string cpu_name() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown cpu";
}

}  // namespace

std::unique_ptr<cost_model> analytic_costs(const device_spec& d) {
  if (d.peak_flops <= 0 || d.memory_bw <= 0)
    fail("device '{}' has no FLOP rate or memory bandwidth for analytic costs", d.name);
  return std::make_unique<analytic>(d);
}

std::unique_ptr<cost_model> measured_costs(cpu_profile p, double slowdown) {
  return std::make_unique<measured>(std::move(p), slowdown);
}

cpu_profile profile_cpu(const model::gpt_config& cfg, int64_t rows, int threads,
                        const std::string& cache_file) {
  const std::string key =
      fmt::format("{}|{}|rows={}|threads={}", cpu_name(), cfg.str(), rows, threads);
  nlohmann::json cache = nlohmann::json::object();
  if (!cache_file.empty() && std::filesystem::exists(cache_file)) {
    try {
      std::ifstream in(cache_file);
      in >> cache;
    } catch (const std::exception&) {
      cache = nlohmann::json::object();  // a damaged cache is rebuilt
    }
    if (cache.contains(key)) {
      cpu_profile p;
      p.threads = threads;
      p.matmul_flops = cache[key]["matmul_flops"].get<double>();
      for (auto& [k, v] : cache[key]["seconds_per_flop"].items())
        p.seconds_per_flop[k] = {v[0].get<double>(), v[1].get<double>()};
      return p;
    }
  }
  model::graph g = model::build_gpt(cfg);
  model::parameter_store store(1);
  model::executor ex(g, store);
  ex.set_profiling(true);
  const int saved = omp_get_max_threads();
  omp_set_num_threads(threads);
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
  }
  auto before = ex.profile();
  const int reps = 3;
  for (int i = 0; i < reps; ++i) {
    ex.forward(0, inputs());
    ex.backward(0, {});
  }
  omp_set_num_threads(saved);
  std::map<std::string, double> flops;  // forward FLOPs per pass, by kind
  for (auto& n : g.nodes()) flops[n.kind] += n.flops_per_token * double(rows * cfg.max_seq);
  cpu_profile p;
  p.threads = threads;
  for (auto& [kind, t] : ex.profile()) {
    auto b = before.count(kind) ? before.at(kind) : model::executor::kind_time{};
    double f = flops[kind] * reps;
    if (f <= 0) continue;
    p.seconds_per_flop[kind] = {(t.forward_s - b.forward_s) / f, (t.backward_s - b.backward_s) / f};
  }
  if (p.seconds_per_flop.count("linear")) p.matmul_flops = 1.0 / p.seconds_per_flop["linear"].first;
  if (!cache_file.empty()) {
    nlohmann::json e;
    e["matmul_flops"] = p.matmul_flops;
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
