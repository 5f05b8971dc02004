#include "partition/device.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <fstream>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.hpp"

namespace merak::partition {
namespace {

device_spec gpu(std::string name, double tflops, int sms, double efficiency,
                double attention_efficiency, double mem_gb, double mem_bw_tbs, double nvlink_gbs,
                double ib_gbs) {
  device_spec d;
  d.name = std::move(name);
  d.peak_flops = tflops * 1e12;
  d.matmul_efficiency = efficiency;
  d.attention_efficiency = attention_efficiency;
  d.sms = sms;
  d.memory_bytes = mem_gb * 1e9;
  d.memory_bw = mem_bw_tbs * 1e12;
  d.intra_bw = nvlink_gbs * 1e9;
  d.intra_latency = 1e-6;  // per ring step (cluster.cpp)
  d.inter_bw = ib_gbs * 1e9;
  d.inter_latency = 5e-6;
  d.devices_per_node = 8;
  d.activation_bytes = 2;  // bf16 mixed precision (weights: 16 bytes per parameter either way)
  // NCCL's ring and tree kernels run one CTA per channel, and NCCL sets up
  // 24 to 32 collective channels on NVLink nodes (its INFO lines: "24 coll
  // channels" on DGX A100); 24 SMs taken.
  d.collective_sms = 24;
  return d;
}

std::string lower(std::string s) {
  for (auto& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

const std::vector<device_spec>& builtin_devices() {
  static const std::vector<device_spec> all = [] {
    std::vector<device_spec> v;
    // Data-sheet bf16 dense tensor-core peaks, SM counts, HBM sizes and
    // bandwidths; large-GEMM efficiency as cuBLAS reaches it (A100 about 85%
    // of peak, Hopper about 75%); NVLink all-reduce bus bandwidth per GPU
    // (about 77% of the per-direction NVLink rate); one 200 / 400 Gb/s HCA
    // per GPU. Sources: docs/planning.md.
    v.push_back(gpu("a100-40gb", 312, 108, 0.85, 0.6, 40, 1.555, 230, 25));
    v.push_back(gpu("a100-80gb", 312, 108, 0.85, 0.6, 80, 2.039, 230, 25));
    v.push_back(gpu("h100-sxm", 989, 132, 0.65, 0.35, 80, 3.35, 350, 50));
    v.push_back(gpu("h100-80gb", 989, 132, 0.65, 0.35, 80, 3.35, 350, 50));
    v.push_back(gpu("h200", 989, 132, 0.65, 0.35, 141, 4.8, 350, 50));
    device_spec cpu;
    cpu.name = "cpu";
    cpu.profiled = true;
    cpu.peak_flops = 0;  // from the profile
    cpu.memory_bytes = 16e9;
    cpu.memory_bw = 10e9;
    // TP and DP sums between threads of one process: a copy and an add per
    // ring step, on cores the actors' compute shares, so far below the
    // memory's bandwidth.
    cpu.intra_bw = 1e9;
    cpu.intra_latency = 30e-6;  // a message between detached actors (measured)
    cpu.inter_bw = 1e9;
    cpu.inter_latency = 100e-6;
    cpu.devices_per_node = 1 << 20;
    v.push_back(cpu);
    return v;
  }();
  return all;
}

nlohmann::json read_json_file(const std::string& path, const char* what) {
  std::ifstream in(path);
  if (!in) fail("cannot read {} '{}'", what, path);
  try {
    return nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    fail("{} '{}': {}", what, path, e.what());
  }
}

device_spec parse_device(const nlohmann::json& e, const std::string& where) {
  if (!e.is_object() || !e.contains("name") || !e["name"].is_string())
    fail("{} needs a string 'name'", where);
  device_spec d;
  d.name = e["name"].get<std::string>();
  const std::string at = fmt::format("{} ('{}')", where, quoted_cut(d.name));
  // A number in [lo, hi] (lo excluded when `open_low`); `whole`: an integer.
  auto need = [&](const char* key, double lo, double hi, bool open_low = false,
                  bool whole = false) -> double {
    if (!e.contains(key) || !e[key].is_number()) fail("{} needs a number '{}'", at, key);
    const double v = e[key].get<double>();
    const bool in = std::isfinite(v) && (open_low ? v > lo : v >= lo) && v <= hi &&
                    (!whole || v == std::floor(v));
    if (!in)
      fail("{}: '{}' is {}, must be {} {} {} {}", at, key, v, whole ? "an integer" : "a number",
           open_low ? "above" : "from", lo, open_low ? fmt::format("and at most {}", hi)
                                                     : fmt::format("to {}", hi));
    return v;
  };
  // Bounds far beyond any device, so that every product of the cost model
  // stays finite and every count fits an int.
  d.peak_flops = need("peak_tflops", 0, 1e9, true) * 1e12;
  d.memory_bytes = need("memory_gb", 0, 1e9, true) * 1e9;
  d.memory_bw = need("memory_bw_gbs", 0, 1e9, true) * 1e9;
  d.intra_bw = need("intra_bw_gbs", 0, 1e9, true) * 1e9;
  d.intra_latency = need("intra_latency_us", 0, 1e9) * 1e-6;
  d.inter_bw = need("inter_bw_gbs", 0, 1e9, true) * 1e9;
  d.inter_latency = need("inter_latency_us", 0, 1e9) * 1e-6;
  d.devices_per_node = int(need("devices_per_node", 1, 1 << 20, false, true));
  if (e.contains("matmul_efficiency")) d.matmul_efficiency = need("matmul_efficiency", 0, 1, true);
  if (e.contains("attention_efficiency"))
    d.attention_efficiency = need("attention_efficiency", 0, 1, true);
  if (e.contains("sms")) d.sms = int(need("sms", 0, 1 << 20, false, true));
  if (e.contains("collective_sms"))
    d.collective_sms = int(need("collective_sms", 0, 1 << 20, false, true));
  if (d.collective_sms > 0 && d.collective_sms >= d.sms)
    fail("{}: collective_sms ({}) must be below sms ({})", at, d.collective_sms, d.sms);
  d.activation_bytes =
      e.contains("activation_bytes") ? int(need("activation_bytes", 1, 8, false, true)) : 2;
  return d;
}

double overlapped_seconds(const device_spec& d, double compute, double comm) {
  if (comm <= 0) return compute;
  const double share = d.sms > 0 && d.collective_sms > 0 ? double(d.collective_sms) / d.sms : 0.0;
  return std::max(comm, compute + share * comm);
}

double gemm_compute_seconds(const device_spec& d, double m, double n, double k, double batch) {
  if (m <= 0 || n <= 0 || k <= 0 || batch <= 0) return 0;
  double wave = 1;
  if (d.sms > 0) {
    // Output tiles of 128 x 128 (cuBLAS's common bf16 tile), one per SM per
    // wave: a last wave that fills few SMs leaves the rest idle.
    const double tiles = batch * std::ceil(m / 128) * std::ceil(n / 128);
    const double waves = std::ceil(tiles / d.sms);
    wave = tiles / (waves * d.sms);
  }
  return 2 * m * n * k * batch / (d.peak_flops * d.matmul_efficiency * wave);
}

double gemm_seconds(const device_spec& d, double m, double n, double k, double batch,
                    int elem_bytes) {
  if (m <= 0 || n <= 0 || k <= 0 || batch <= 0) return 0;
  const double bytes = (m * k + k * n + m * n) * batch * elem_bytes;
  return std::max(gemm_compute_seconds(d, m, n, k, batch),
                  bytes / (d.memory_bw * d.memory_efficiency)) +
         d.launch_s;
}

device_spec find_device(const std::string& name, const std::string& file) {
  std::vector<device_spec> all = builtin_devices();
  if (!file.empty()) {
    const nlohmann::json j = read_json_file(file, "device file");
    if (!j.contains("devices") || !j["devices"].is_array())
      fail("device file '{}': expected {{\"devices\": [...]}}", file);
    int i = 0;
    for (auto& e : j["devices"]) {
      all.push_back(parse_device(e, fmt::format("device file '{}': devices[{}]", file, i)));
      ++i;
    }
  }
  for (auto it = all.rbegin(); it != all.rend(); ++it)  // the file overrides built-ins
    if (lower(it->name) == lower(name)) return *it;
  std::string known;
  for (auto& d : all) known += (known.empty() ? "" : ", ") + d.name;
  fail("unknown --device-type '{}' (known: {})", name, known);
}

}  // namespace merak::partition
