#pragma once
// Op costs for planning: how long each node of a model graph takes forward
// and backward on one device, for micro-batches of a given number of
// tokens. A node of a TP rewrite already carries its shard's FLOPs.
//
// Two sources:
// - analytic (a device_spec): linear layers as GEMMs of their shapes
//   (device.hpp gemm_seconds: efficiency by shape), attention as its batched
//   per-head GEMMs plus the softmax's memory traffic when the model's
//   sequence length and head size are given, everything else bound by
//   memory bandwidth (its activation bytes read and written) plus a kernel
//   launch; backward is the input- and weight-gradient GEMMs for linear
//   layers, twice forward for other nodes with parameters, once for the rest.
// - measured (profile_cpu): this machine's seconds per FLOP for each layer
//   kind, forward and backward, measured by running the model at the
//   micro-batch shape the plan implies (each shape profiled when a plan first
//   asks for it) with the thread count each actor gets; cached per (CPU,
//   shape, threads, cores) in a JSON file so a plan does not profile twice.
//   The profile also measures the optimizer step and how much slower an op
//   runs when every core is busy (memory bandwidth shared).
//
// Actor "devices" on one CPU share its cores: sharing() says how many, and
// the simulator slows ops down while more threads are busy than there are
// cores (simulator.hpp, core_sharing).

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "model/gpt.hpp"
#include "model/graph.hpp"
#include "partition/device.hpp"

namespace merak::partition {

struct node_time {
  double forward_s = 0, backward_s = 0;
  double weight_s = 0;  // of backward_s: the weight gradient a split backward (zb-h1) defers
};

// How devices share hardware (0 cores: each device is its own).
struct sharing_model {
  int cores = 0;          // cores the devices share
  int threads = 1;        // compute threads per device (actor)
  double contention = 1;  // op time with every core busy / alone, >= 1
};

class cost_model {
 public:
  virtual ~cost_model() = default;
  virtual node_time time(const model::node_info& n, int64_t tokens) const = 0;
  // Matrix-product FLOP/s one device reaches (the MFU denominator).
  virtual double peak_flops() const = 0;
  // One device's optimizer step (AdamW, gradient zeroing) over `params`
  // parameters, alone on its hardware.
  virtual double optimizer_s(double params) const = 0;
  // How the devices share hardware at micro-batches of `tokens` tokens.
  virtual sharing_model sharing(int64_t tokens) const {
    (void)tokens;
    return {};
  }
};

std::unique_ptr<cost_model> analytic_costs(const device_spec& d);
// How attention's kernels run on a GPU:
//   fused    one kernel (flash attention, cuDNN's fused SDPA): the causal
//            half of the score GEMMs, no T x T tensor in memory; backward
//            2.5 x forward (it recomputes the scores)
//   unfused  the scores materialised (Megatron-LM 2021): both GEMMs over the
//            whole T x T square, then passes over the T x T tensors in 16-bit
//            elements, a dropout mask counting half: forward 6.5 (scores
//            written; scale-mask-softmax read and write; dropout read, write
//            and mask; P V reads), backward 9.5 (dP written; dV reads P;
//            dropout's gradient 2.5; softmax's gradient reads P and dP and
//            writes dS; dQ and dK read dS)
//   fused_v1 one kernel of the first generation (FlashAttention 1 and its
//            Triton port, which adds an attention bias such as ALiBi): the
//            memory of `fused`, at half its rate (FlashAttention-2 runs
//            about twice as fast, forward and backward together)
enum class attention_kernel { fused, fused_v1, unfused };
std::string_view attention_kernel_name(attention_kernel k);
attention_kernel parse_attention_kernel(std::string_view name);  // throws naming the value
// Whether the kernel keeps the T x T scores out of memory (a log-sum-exp per
// head and token instead).
bool attention_is_fused(attention_kernel k);

// With the GEMM shapes of `cfg`'s attention (sequence length, head size).
std::unique_ptr<cost_model> analytic_costs(const device_spec& d, const model::gpt_config& cfg,
                                           attention_kernel attention = attention_kernel::fused);

// Seconds per forward FLOP per layer kind (forward, backward), at one shape.
// The fastest FLOP rate a profile observed: the linear layers' forward
// rate, or any kind's forward or backward rate (a backward pass does twice
// its forward FLOPs) when faster. MFU is measured against it, so no op's
// cost, and no plan, exceeds 100%.
struct cpu_profile;
double peak_flops_of(const cpu_profile& p);

struct cpu_profile {
  std::map<std::string, std::pair<double, double>> seconds_per_flop;
  int threads = 1;
  int64_t rows = 1;                  // sequences per micro-batch
  double matmul_flops = 0;           // FLOP/s of the linear layers, forward
  double contention = 1;             // op time with cores / threads copies running at once / alone
  double optimizer_s_per_param = 0;  // AdamW step + gradient zeroing, per parameter
};

// Profiles `cfg` (at most two of its blocks: the rates per FLOP do not
// depend on depth) at micro-batches of `rows` sequences with `threads`
// OpenMP threads: 2 warm-up and 5 measured forward+backward passes alone
// (the least time of each kind),
// the same with cores / threads copies at once for at least half a second
// (contention), and the
// optimizer step. Reads the result from `cache_file` when it holds this
// (CPU, shape, threads, cores); writes it there otherwise ("" : no cache).
cpu_profile profile_cpu(const model::gpt_config& cfg, int64_t rows, int threads, int cores,
                        const std::string& cache_file);

// Costs from profiles of `cfg` taken on demand, one per micro-batch shape
// (tokens / cfg.max_seq sequences), with `threads` per device on `cores`
// shared cores; `nominal_rows` is the shape whose matmul rate is the MFU
// denominator.
std::unique_ptr<cost_model> measured_costs(const model::gpt_config& cfg, int threads, int cores,
                                           int64_t nominal_rows, std::string cache_file);
// Costs from given profiles (tests): each shape uses the profile of the
// nearest row count.
std::unique_ptr<cost_model> measured_costs(std::vector<cpu_profile> profiles, int max_seq,
                                           int cores);

}  // namespace merak::partition
