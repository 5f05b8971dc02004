#pragma once
// Device descriptions for planning without the hardware.
//
// A device is what one (dp, pp, tp) shard runs on: its compute rate, memory
// and links. Built-in: A100-40GB, A100-80GB, H100-SXM (also H100-80GB), H200
// (dense bf16 tensor-core rates, NVLink inside a node, InfiniBand between
// nodes; the constants and their sources are in docs/planning.md) and
// "cpu", this machine's cores shared by N actor "devices" (its rates come
// from profiling, cost_model.hpp). More can be given in a JSON file:
//
//   {"devices": [{"name": "my-gpu", "peak_tflops": 100, "memory_gb": 24,
//     "memory_bw_gbs": 900, "intra_bw_gbs": 64, "intra_latency_us": 10,
//     "inter_bw_gbs": 12.5, "inter_latency_us": 20, "devices_per_node": 4,
//     "matmul_efficiency": 0.6, "attention_efficiency": 0.5, "sms": 80}]}
//
// A GEMM's time on a device (gemm_seconds) is the larger of its FLOPs at
// matmul_efficiency x peak, scaled by how full the last wave of output
// tiles leaves the streaming multiprocessors, and its bytes at the
// achievable memory bandwidth, plus a kernel launch.

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace merak::partition {

struct device_spec {
  std::string name;
  double peak_flops = 0;            // dense matmul FLOP/s
  double matmul_efficiency = 0.6;   // share of peak a large GEMM reaches
  // Share of peak a fused causal attention kernel reaches, forward and
  // backward together (0: matmul_efficiency).
  double attention_efficiency = 0;
  int sms = 0;                      // streaming multiprocessors (0: no wave model)
  double memory_efficiency = 0.85;  // share of memory_bw streaming kernels reach
  double launch_s = 4e-6;           // per kernel
  double memory_bytes = 0;
  double memory_bw = 0;      // bytes/s, for memory-bound ops and the optimizer
  double intra_bw = 0;       // bytes/s per device inside a node (all-reduce bus bandwidth)
  double intra_latency = 0;  // s per message
  double inter_bw = 0;       // bytes/s per device between nodes
  double inter_latency = 0;
  int devices_per_node = 8;
  int activation_bytes = 4;  // per element: 2 for bf16 training on GPUs, 4 for fp32
  // SMs a collective's kernels hold while they run beside compute (NCCL:
  // one CTA per channel): compute overlapped with a collective runs on the
  // other SMs. 0: no contention (a profiled CPU, whose profile already
  // shares its cores with the transports' threads).
  int collective_sms = 0;
  bool profiled = false;     // "cpu": op times come from a measured profile
};

// The built-in devices.
const std::vector<device_spec>& builtin_devices();
// The JSON a planning input file holds; errors name `what` and the file
// ("cannot read device file 'x.json'", "cluster file 'c.json': <parse error>").
nlohmann::json read_json_file(const std::string& path, const char* what);
// One device of a device file's "devices" list (or a cluster file's
// "device" object); errors start with `where`.
device_spec parse_device(const nlohmann::json& e, const std::string& where);

// Seconds that `compute` seconds of work take beside a collective of `comm`
// seconds on d: while the collective runs the work has sms -
// collective_sms SMs, so max(comm, compute + share x comm) with share =
// collective_sms / sms (the work slowed for as long as the collective
// runs; a collective longer than the slowed work sets the time).
double overlapped_seconds(const device_spec& d, double compute, double comm);

// Seconds of `batch` GEMMs of an (m x k) by (k x n) product with elements of
// `elem_bytes` (see above).
double gemm_seconds(const device_spec& d, double m, double n, double k, double batch,
                    int elem_bytes);
// Its compute part alone (no memory bound, no launch).
double gemm_compute_seconds(const device_spec& d, double m, double n, double k, double batch);
// A device by name (case-insensitive) from the built-ins and, if `file` is
// not empty, a JSON file of more. Throws merak::error naming the file, the
// field or the unknown name (listing the known ones).
device_spec find_device(const std::string& name, const std::string& file = "");

}  // namespace merak::partition
