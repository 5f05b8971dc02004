#pragma once
// Device descriptions for planning without the hardware.
//
// A device is what one (dp, pp, tp) shard runs on: its compute rate, memory
// and links. Built-in: A100-40GB, A100-80GB, H100-80GB (dense bf16 tensor
// core rates, NVLink inside a node, InfiniBand between nodes) and "cpu",
// this machine's cores shared by N actor "devices" (its rates come from
// profiling, cost_model.hpp). More can be given in a JSON file:
//
//   {"devices": [{"name": "my-gpu", "peak_tflops": 100, "memory_gb": 24,
//     "memory_bw_gbs": 900, "intra_bw_gbs": 64, "intra_latency_us": 10,
//     "inter_bw_gbs": 12.5, "inter_latency_us": 20, "devices_per_node": 4,
//     "matmul_efficiency": 0.6}]}

#include <cstdint>
#include <string>
#include <vector>

namespace merak::partition {

struct device_spec {
  std::string name;
  double peak_flops = 0;           // dense matmul FLOP/s
  double matmul_efficiency = 0.6;  // share of peak a transformer's GEMMs reach
  double memory_bytes = 0;
  double memory_bw = 0;      // bytes/s, for memory-bound ops and the optimizer
  double intra_bw = 0;       // bytes/s per device inside a node (all-reduce bus bandwidth)
  double intra_latency = 0;  // s per message
  double inter_bw = 0;       // bytes/s per device between nodes
  double inter_latency = 0;
  int devices_per_node = 8;
  int activation_bytes = 4;  // per element: 2 for bf16 training on GPUs, 4 for fp32
  bool profiled = false;     // "cpu": op times come from a measured profile
};

// The built-in devices.
const std::vector<device_spec>& builtin_devices();
// A device by name (case-insensitive) from the built-ins and, if `file` is
// not empty, a JSON file of more. Throws merak::error naming the file, the
// field or the unknown name (listing the known ones).
device_spec find_device(const std::string& name, const std::string& file = "");

}  // namespace merak::partition
