#pragma once
// Automatic 3D-parallel plans: the search behind `merak plan` and
// `merak train --devices N`.
//
// For a GPT model, a global batch and N devices, every dp x tp x pp that
// fits the rules below is tried with each micro-batch count, schedule
// (GPipe, 1F1B, shifted, zb-h1, interleaved), recomputation (none, full,
// stage-aware: the least that fits the memory budget, selective) and TP
// overlap level, and, where the request asks, each data-parallel sharding
// strategy and sequence parallelism on and off. Stage boundaries
// minimise the slowest stage's measured/modelled time (forward + backward +
// recomputation + TP communication) over the graph's cut points, by dynamic
// programming. Each candidate is scored by the event simulator running the
// same schedule policies as the actor runtime, plus the exposed
// data-parallel all-reduce and the optimizer step. Candidates sharing tp,
// pp, micro-batch size and overlap share one stage split; candidates are
// simulated in the order of a lower bound on their step (the busiest
// stage's ops, never faster than alone) and those whose bound cannot reach
// the best plan or a runner-up are not simulated.
//
// Rules, reported by name when they reject candidates: "tp divides heads
// and features", "tp within a node", "dp x tp x pp = devices",
// "global batch divides into dp x micro-batches", "pp within cut points",
// "shifted needs pp >= 3", "sequence parallel splits the sequence by tp",
// "memory budget".

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "model/gpt.hpp"
#include "partition/cluster.hpp"
#include "partition/cost_model.hpp"
#include "partition/device.hpp"
#include "partition/layout.hpp"
#include "partition/placement.hpp"
#include "partition/recompute.hpp"
#include "partition/schedule.hpp"

namespace merak::partition {

struct plan_request {
  model::gpt_config model;
  int64_t global_batch = 8;  // sequences per step
  int devices = 1;
  int nodes = 1;  // hosts; devices spread evenly
  // Processes that host the actors: 0 is one per device (the GPU layout,
  // processes in host order), 1 puts every actor in one process (merak
  // train --devices on this machine's cores).
  int processes = 0;
  device_spec device;
  // The links between devices (cluster.hpp); unset: what `device` implies
  // (cluster_of). When set, `device` must be its device.
  std::optional<cluster_spec> cluster;
  int64_t memory_budget = 0;  // bytes per device; 0: the device's memory
  // GPU attention kernels (cost_model.hpp).
  attention_kernel attention = attention_kernel::fused;
  // Full recomputation on every stage, the last too (Megatron-LM's
  // activation checkpointing); merak's runtime keeps the last stage's
  // activations, which it needs at once.
  bool recompute_every_stage = false;
  int max_micro_batches = 64;
  // Restrict the search (0 / empty: free).
  int dp = 0, tp = 0, pp = 0, micro_batches = 0;
  std::vector<schedule_kind> schedules;  // empty: all
  std::vector<recompute_kind> recomputes;
  int tp_overlap = -1;  // -1: all levels
  int chunks = 2;       // model chunks per device of the interleaved schedule
  // Memory strategies the plans use: how the data-parallel replicas shard
  // the optimizer state, gradients and parameters, and sequence parallelism
  // with tp > 1.
  sharding_strategy sharding = sharding_strategy::no_shard;
  // The data-parallel buckets' size (the runtime's --bucket-mb): under
  // optim_grads_params the unit a stage gathers, so a gather holds at least
  // a bucket however small a segment is.
  int64_t bucket_bytes = int64_t(4) << 20;
  bool sequence_parallel = false;
  // --overlap-param-gather: a sharded optimizer's all-gather of updated
  // values runs behind the next step's first forward of each stage.
  bool overlap_param_gather = false;
  // Activations and gradients between stages: sent and received while the
  // stages compute (merak's actors), or, off, by the stage between its ops
  // while it waits: each op's send and the next op's receive batched, the
  // device synchronized after them (Megatron-LM's schedules without
  // --overlap-p2p-comm). Off, an op that sends lasts its compute and the
  // transfer, and the receiver starts when it ends.
  bool overlap_p2p_comm = true;
  // Megatron-LM's scatter/gather of pipeline tensors (tp > 1, without
  // sequence parallelism): each TP rank sends 1/tp of the activation, the
  // receiving ranks all-gather it over their node's links.
  bool scatter_gather_p2p = false;
  // Sharded gradients and parameters: each micro-batch's reduce-scatters
  // and all-gathers overlap the ops beside them (merak's runtime), or, on,
  // lie on the critical path, added to the ops' time (a PyTorch FSDP run as
  // MosaicML's micro-batch sweeps measure it, docs/results/planning.md).
  bool exposed_shard_collectives = false;
  // Transformer blocks per recomputed segment (layout::recompute_layers).
  int recompute_layers = 0;
  // Stage-aware recomputation by the formula (partition::plan_stage_aware)
  // with stage 0's ratio r0, as the runtime plans it without a memory
  // budget (--recompute-ratio); 0: the least recomputation that fits the
  // memory budget (partition::plan_for_budget).
  double recompute_ratio = 0;
  // Search the memory strategies instead of fixing them (what `merak plan`
  // does where their flags are not given): the sharding strategies no_shard,
  // optim, optim_grads and optim_grads_params when dp > 1, sequence
  // parallelism on and off when tp > 1, and for full and stage-aware
  // recomputation segments of half a block (0) and of one block
  // (recompute_layers 1: one input kept a layer, a whole layer rebuilt at once).
  // Off: every plan uses `sharding`, `sequence_parallel` and `recompute_layers` as given.
  bool search_sharding = false, search_sequence_parallel = false, search_recompute_layers = false;
  // A fixed stage split (pp + 1 node indices of the single-device graph, 0
  // first; pp x chunks + 1 for the interleaved schedule's virtual stages;
  // the runtime's, to compare with it); empty: the planner's own.
  std::vector<int> stage_bounds;
  // Simulate every candidate (the search otherwise skips those whose lower
  // bound cannot make the best plan or a runner-up; the choice is the same).
  bool exhaustive = false;
};

// Where a step's time goes along its critical path: the chain of ops and
// messages, each waiting for the one before, that ends at the pipeline's
// last op (walked back from it through the simulated trace).
struct critical_path {
  int ops = 0;                    // ops on the path
  double forward_s = 0;           // F, Fpc and R on the path
  double backward_s = 0;          // B on the path (with recomputation inside it)
  double links_s = 0;             // activations and gradients in flight on the path
  std::vector<int> stage_ops;     // ops on the path per stage
  std::string first_op, last_op;  // "s0:F0", "s0:B95"
};

struct stage_plan {
  int first = 0, last = 0;  // nodes of the single-device graph
  std::string first_layer, last_layer;
  int recompute_segments = 0, segments = 0;
  int64_t memory_bytes = 0;
  // memory_bytes by category: parameter values, gradients (and the
  // data-parallel bucket buffers), AdamW moments, activations at the peak.
  int64_t parameters_bytes = 0, gradients_bytes = 0, optimizer_bytes = 0, activations_bytes = 0;
  // The most gradient bytes held at once during a backward: gradients_bytes,
  // or under gradient shards (dp > 1) the shards plus four buckets (the one
  // leaving, its copy, two copies with the reducer) and the largest node's
  // whole gradients. memory_bytes counts it in place of gradients_bytes.
  int64_t gradients_peak_bytes = 0;
  double forward_s = 0, backward_s = 0;  // one micro-batch
  double weight_s = 0;                   // of backward_s: the weight gradients (zb-h1's W)
};

// A layout (partition/layout.hpp) with where its stages cut the model, what
// each recomputes, and what the cost model predicts.
struct plan : layout {
  // One per pipeline device. Interleaved, a device's bytes, segments and
  // times are its chunks' summed (the activations' peaks too: an upper
  // bound), its nodes and layers from its first chunk's first to its last
  // chunk's last.
  std::vector<stage_plan> stages;
  // Interleaved: the virtual stages, the model cut into pp x chunks by
  // time; virtual stage k is chunk k / pp of device k % pp. Empty otherwise.
  std::vector<stage_plan> chunk_stages;
  double step_time_s = 0, tokens_per_s = 0, mfu = 0;
  double pipeline_s = 0, dp_exposed_s = 0, optimizer_s = 0;  // parts of step_time_s
  // Megatron-LM's count of a step's FLOPs per device per second (see
  // megatron_flops), and whether it counts recomputation.
  double tflops_per_device = 0;
  bool flops_count_recompute = false;
  // Communication, priced on the cluster: one TP all-reduce of a
  // micro-batch's activations (and its algorithm), one activation between
  // stages (the slowest boundary), the whole data-parallel all-reduce.
  double tp_allreduce_s = 0, p2p_s = 0, dp_allreduce_s = 0;
  std::string tp_algo, dp_algo;
  critical_path path;
  // Which process hosts each (dp, pp, tp) actor (partition/placement.hpp):
  // the default placement over plan_request::processes, so TP shards sit on
  // adjacent ranks of one host (the "tp within a node" rule) and stages next.
  placement place;
  // The host of each process rank (processes spread evenly over the nodes).
  std::vector<int> host_of_rank;
  // One line: "dp=.. tp=.. pp=.. m=.. <schedule> recompute=.. tp-overlap=..", then
  // " sharding=<strategy>" unless no_shard and " sequence-parallel" when on.
  std::string str() const;
  // What the run does: "stage-aware" that recomputes nothing is "none".
  const char* recompute_name() const;
};

struct plan_result {
  plan best;
  std::vector<plan> runners_up;         // next best, fastest first
  std::map<std::string, int> rejected;  // rule -> candidates it rejected
  int evaluated = 0;                    // candidates that fit every rule
  int simulated = 0;  // of them, scored by the simulator (the rest were bounded out)
};

// Megatron-LM's FLOPs of one step (Narayanan et al., SC'21, eq. 3, in the
// general form Megatron-LM counts grouped-query attention and gated MLPs
// with) for global batch B, sequence s, layers l, hidden h, vocabulary V,
// g key/value heads per query head, MLP width f and gate factor k (SwiGLU
// 3/2, GELU 1):
//   12 B s l h^2 (r ((1 + g + s/h) + k f/h) + V/(2 l h)),
// r = 4/3 with full recomputation, else 1. For GPT-2 (g = 1, f = 4h, k = 1)
// this is 72 B s l h^2 (1 + s/(6h) + V/(12 l h)) without recomputation and
// 96 B s l h^2 (1 + s/(6h) + V/(16 l h)) with it.
double megatron_flops(const model::gpt_config& m, int64_t global_batch, bool recompute);

// Searches the plans; throws merak::error naming the rules when none fits.
plan_result search_plans(const plan_request& r, const cost_model& costs);

// Where a CPU profile is cached by default: $XDG_CACHE_HOME/merak/cpu-profile.json,
// else ~/.cache/merak/cpu-profile.json ("" when neither is set).
std::string default_profile_cache();

// The cost model a request plans with: analytic for a device model; for
// "cpu", profiles of this machine measured at each micro-batch shape a
// candidate asks for, with cores / devices threads per actor (at least one,
// as the runtime assigns them), cached in `cache_file`; the simulator shares
// the cores between the actors that are busy at each moment.
std::unique_ptr<cost_model> costs_for(const plan_request& r, int cores,
                                      const std::string& cache_file);

// Scores one plan (stage split and recomputation chosen as in the search);
// throws merak::error naming the rule it breaks.
plan evaluate_plan(const plan_request& r, const cost_model& costs, int dp, int tp, int pp, int m,
                   schedule_kind kind, recompute_kind rc, int tp_overlap);

}  // namespace merak::partition
