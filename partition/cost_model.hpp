#pragma once
// Op costs for planning: how long each node of a model graph takes forward
// and backward on one device, for micro-batches of a given number of
// tokens. A node of a TP rewrite already carries its shard's FLOPs.
//
// Two sources:
// - analytic (a device_spec): matrix products at matmul_efficiency x peak,
//   everything else bound by memory bandwidth (its activation bytes read
//   and written); backward costs twice forward for nodes with parameters
//   (input and weight gradients), once for the rest.
// - measured (profile_cpu): this machine's seconds per FLOP for each layer
//   kind, forward and backward, measured by running the model at the plan's
//   micro-batch shape with the thread count each actor gets; cached per
//   (CPU, kind, shape, threads) in a JSON file so a plan does not profile
//   twice.

#include <map>
#include <memory>
#include <string>

#include "model/gpt.hpp"
#include "model/graph.hpp"
#include "partition/device.hpp"

namespace merak::partition {

struct node_time {
  double forward_s = 0, backward_s = 0;
};

class cost_model {
 public:
  virtual ~cost_model() = default;
  virtual node_time time(const model::node_info& n, int64_t tokens) const = 0;
  // Matrix-product FLOP/s one device reaches (the MFU denominator).
  virtual double peak_flops() const = 0;
};

std::unique_ptr<cost_model> analytic_costs(const device_spec& d);

// Seconds per forward FLOP per layer kind (forward, backward).
struct cpu_profile {
  std::map<std::string, std::pair<double, double>> seconds_per_flop;
  int threads = 1;
  double matmul_flops = 0;  // FLOP/s of the linear layers, forward
};

// Profiles `cfg` at micro-batches of `rows` sequences with `threads` OpenMP
// threads (2 warm-up and 3 measured forward+backward passes), or reads the
// result from `cache_file` when it holds this (CPU, shape, threads); writes
// it there otherwise ("" : no cache).
cpu_profile profile_cpu(const model::gpt_config& cfg, int64_t rows, int threads,
                        const std::string& cache_file);

// Costs from a profile; `slowdown` multiplies every time (N actors sharing
// fewer cores).
std::unique_ptr<cost_model> measured_costs(cpu_profile p, double slowdown);

}  // namespace merak::partition
