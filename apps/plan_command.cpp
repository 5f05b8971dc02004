// `merak plan`: the automatic 3D-parallel plan for a GPT or Llama model on N devices
// (partition/planner.hpp), as text or one JSON object.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "apps/commands.hpp"
#include "apps/flag_checks.hpp"
#include "apps/memory_flags.hpp"
#include "apps/pipeline_flags.hpp"
#include "apps/model_flags.hpp"
#include "apps/plan_output.hpp"
#include "core/error.hpp"
#include "model/gpt.hpp"
#include "partition/planner.hpp"

namespace merak::apps {
namespace {

constexpr int kmax_searched_micro_batches = 4096;

struct plan_flags {
  model_family_flags family;  // --model and the Llama family's flags
  partition::plan_request req;
  std::string device_type = "cpu";
  std::string device_file;
  std::string cluster;  // built-in name or JSON file
  std::string attention = "fused";
  std::string precision;  // empty: bf16 on GPUs, fp32 on this CPU
  bool explain = false;
  std::string cache;
  bool json = false;
  int cores = 0;
  std::vector<std::string> schedules, recomputes;
  memory_flags memory;
  virtual_pipeline_flags virtual_pipeline;  // Megatron's names for interleaved and its chunks
  bool no_sequence_parallel = false;  // --no-sequence-parallel: SP off, not searched
  int micro_batch_size = 0;           // > 0: Megatron's --micro-batch-size (needs --dp)
  int nodes_given = 0;                // --nodes was given
};

int run_plan(plan_flags& f) {
  apply_model_family(f.family, f.req.model);
  f.req.model.validate();
  if (!f.cluster.empty()) {
    f.req.cluster = partition::find_cluster(f.cluster);
    f.req.device = f.req.cluster->device;
    if (f.nodes_given == 0) {
      const int per = f.req.cluster->devices_per_node;
      f.req.nodes = (f.req.devices + per - 1) / per;
    }
  } else {
    f.req.device = partition::find_device(f.device_type, f.device_file);
  }
  if (f.req.nodes < 1 || f.req.nodes > f.req.devices)
    fail("--nodes must be from 1 to --devices {} (each node holds a device; got {})", f.req.devices,
         f.req.nodes);
  if (f.req.max_micro_batches < 1)
    fail("--max-micro-batches must be at least 1 (got {})", f.req.max_micro_batches);
  // The simulation of a pipeline costs in proportion to its micro-batches:
  // the search stops at kmax_searched_micro_batches (a given count is run).
  if (f.req.max_micro_batches > kmax_searched_micro_batches) {
    spdlog::warn("--max-micro-batches {}: the search tries at most {} micro-batches",
                 f.req.max_micro_batches, kmax_searched_micro_batches);
    f.req.max_micro_batches = kmax_searched_micro_batches;
  }
  // A micro-batch holds at least one sequence: larger counts are no split.
  if (f.req.global_batch >= 1)
    f.req.max_micro_batches = int(std::min<int64_t>(f.req.max_micro_batches, f.req.global_batch));
  if (f.micro_batch_size != 0) {
    // Megatron's habit: --tp and --pp given, dp the rest of the devices.
    if (f.req.dp < 1 && f.req.tp > 0 && f.req.pp > 0 && f.req.devices % (f.req.tp * f.req.pp) == 0)
      f.req.dp = f.req.devices / (f.req.tp * f.req.pp);
    if (f.req.dp < 1)
      fail(
          "--micro-batch-size needs --dp (or --tp and --pp): the planner searches dp, and the "
          "micro-batch count is the batch / (dp x size)");
    f.req.micro_batches = partition::micro_batches_for_size(
        f.req.global_batch, f.req.dp, f.micro_batch_size, "--global-batch-size");
  }
  f.req.attention = partition::parse_attention_kernel(f.attention);
  if (!f.precision.empty()) {
    const model::dtype p = model::parse_precision(f.precision);
    if (f.req.device.profiled) {
      f.req.model.activations = p;  // the profile runs the model in that precision
    } else if (p == model::dtype::f32) {
      // GPUs train fp32 on their TF32 tensor cores: half the dense bf16
      // rate on A100, H100 and H200, with 4-byte activations.
      f.req.device.peak_flops *= 0.5;
      f.req.device.activation_bytes = 4;
    }
  }
  if (const int v = virtual_pipeline_chunks(f.virtual_pipeline, f.req.model.layers, f.req.pp);
      v > 0) {
    if (!f.schedules.empty() && (f.schedules.size() != 1 || f.schedules[0] != "interleaved"))
      fail("Megatron-LM's virtual pipeline flags plan the interleaved schedule: drop --schedule");
    f.schedules = {"interleaved"};
    f.req.chunks = v;
  }
  for (auto& s : f.schedules) f.req.schedules.push_back(partition::parse_schedule(s));
  if (f.recomputes.empty() &&
      (!f.memory.recompute_granularity.empty() || f.memory.recompute_activations))
    f.recomputes.push_back(recompute_of(f.memory, ""));
  else if (f.recomputes.size() == 1)
    f.recomputes[0] = recompute_of(f.memory, f.recomputes[0]);
  for (auto& s : f.recomputes) f.req.recomputes.push_back(partition::parse_recompute_kind(s));
  // Grouped layers apply to full and stage-aware recomputation, which a
  // search (no --recompute) tries too.
  std::string grouped = f.recomputes.empty() ? "full" : f.recomputes[0];
  for (const auto& s : f.recomputes)
    if (s == "full" || s == "stage-aware") grouped = s;
  f.req.recompute_layers = recompute_layers_of(f.memory, grouped);
  f.req.sharding = sharding_of(f.memory);
  f.req.sequence_parallel = f.memory.sequence_parallel;
  f.req.overlap_param_gather = f.memory.overlap_param_gather;
  // Memory strategies not fixed by a flag are searched.
  f.req.search_sharding = f.memory.sharding.empty() && !f.memory.distributed_optimizer;
  f.req.search_sequence_parallel = !f.memory.sequence_parallel && !f.no_sequence_parallel;
  f.req.search_recompute_layers =
      f.memory.recompute_method.empty() && f.memory.recompute_num_layers == 0;
  int cores = f.cores > 0 ? f.cores : int(std::thread::hardware_concurrency());
  auto costs = partition::costs_for(f.req, cores,
                                    f.cache.empty() ? partition::default_profile_cache() : f.cache);
  auto res = partition::search_plans(f.req, *costs);
  if (f.json) {
    std::printf("%s\n", plan_json(f.req, res).dump().c_str());
  } else {
    print_plan(f.req, res, stdout);
    if (f.explain) explain_plan(f.req, res.best, stdout);
  }
  return 0;
}

}  // namespace

action add_plan_command(CLI::App& parent) {
  auto f = std::make_shared<plan_flags>();
  auto* c = parent.add_subcommand("plan", "Choose a dp x tp x pp plan for a model and N devices");
  auto& m = f->req.model;
  m.max_seq = 1024;
  add_model_family_flags(c, &f->family, &m);
  c->add_option("--layers,--num-layers", m.layers, "Transformer blocks (L)")->capture_default_str();
  c->add_option("--dim,--hidden-size", m.dim, "Channels (C)")->capture_default_str();
  c->add_option("--heads,--num-attention-heads", m.heads, "Attention heads (NH)")
      ->capture_default_str();
  c->add_option("--seq,--seq-length", m.max_seq, "Sequence length (T)")->capture_default_str();
  c->add_option("--vocab", m.vocab, "Vocabulary (V)")->capture_default_str();
  c->add_option("--global-batch-size,--batch", f->req.global_batch, "Sequences per step")
      ->capture_default_str();
  c->add_option("--devices", f->req.devices, "Devices (GPUs, or actor devices on this CPU)")
      ->capture_default_str();
  auto* nodes = c->add_option("--nodes", f->req.nodes,
                              "Hosts the devices are spread over (with --cluster: as many as "
                              "the devices fill)")
                    ->capture_default_str();
  c->add_option("--processes", f->req.processes,
                "Processes hosting the actors, for the plan's placement (0: one per device)")
      ->capture_default_str();
  c->add_option("--device-type", f->device_type,
                "a100-40gb, a100-80gb, h100-80gb, cpu, or one from --device-file")
      ->capture_default_str();
  c->add_option("--device-file", f->device_file, "JSON file of more device types");
  c->add_option("--cluster", f->cluster,
                "A cluster: dgx-a100-hdr, dgx-h100-ndr or a JSON file (docs/planning.md); sets "
                "the device type and prices collectives over its links");
  auto* chunks = integer_in(c->add_option("--chunks", f->req.chunks,
                                         "Model chunks per device of the interleaved schedule "
                                         "(Megatron-LM's virtual pipeline stages)"),
                           1, 64)
                    ->capture_default_str();
  add_virtual_pipeline_flags(c, &f->virtual_pipeline);
  c->get_option("--num-virtual-stages-per-pipeline-rank")->excludes(chunks);
  c->get_option("--num-layers-per-virtual-pipeline-stage")->excludes(chunks);
  c->add_option("--precision", f->precision,
                "fp32 or bf16 (default: bf16 on GPU devices, as they train; fp32 on the cpu "
                "device)");
  c->add_option("--attention", f->attention,
                "GPU attention kernels: fused (FlashAttention-2 / cuDNN SDPA), fused-v1 "
                "(FlashAttention 1 or its Triton port, half fused's rate) or unfused (scores in "
                "memory, as Megatron-LM in 2021)")
      ->capture_default_str();
  c->add_flag("--recompute-every-stage", f->req.recompute_every_stage,
              "Full recomputation on the last stage too (Megatron-LM's activation checkpointing)");
  c->add_flag("--overlap-p2p-comm,!--no-overlap-p2p-comm", f->req.overlap_p2p_comm,
              "Stages send and receive while they compute (merak's actors: the default); with "
              "--no-overlap-p2p-comm between their ops, waiting for it (Megatron-LM's schedules "
              "without --overlap-p2p-comm)");
  c->add_flag("--scatter-gather-tensors-in-pipeline", f->req.scatter_gather_p2p,
              "Each TP rank sends 1/tp of an activation, the receivers all-gather it "
              "(Megatron-LM's, tp > 1 without sequence parallelism)");
  c->add_flag("--exposed-shard-collectives", f->req.exposed_shard_collectives,
              "Under optim_grads and optim_grads_params, each micro-batch's reduce-scatters and "
              "all-gathers add to the ops' time instead of overlapping them (a PyTorch FSDP "
              "run, as MosaicML's measurements show it)");
  c->add_flag("--explain", f->explain,
              "Also print where the step's time goes: its critical path, communication and the "
              "FLOP count");
  c->add_option("--memory-budget", f->req.memory_budget, "Bytes per device (0: its memory)")
      ->capture_default_str();
  c->add_option("--max-micro-batches", f->req.max_micro_batches,
                "Largest micro-batch count tried (at most the batch, and 4096)")
      ->capture_default_str();
  c->add_option("--dp", f->req.dp, "Fix dp (0: search)");
  c->add_option("--tp,--tensor-model-parallel-size", f->req.tp, "Fix tp (0: search)");
  c->add_option("--pp,--pipeline-model-parallel-size", f->req.pp, "Fix pp (0: search)");
  auto* micro_batches = c->add_option("--micro-batches", f->req.micro_batches,
                                      "Fix the micro-batch count (0: search)");
  c->add_option("--micro-batch-size", f->micro_batch_size,
                "Sequences per micro-batch (Megatron's; needs --dp): fixes --micro-batches")
      ->excludes(micro_batches);
  c->add_option("--schedule", f->schedules,
                "Only these schedules (gpipe, 1f1b, shifted, zb-h1, interleaved)");
  c->add_option("--recompute", f->recomputes, "Only these: none, full, stage-aware, selective");
  add_memory_flags(c, &f->memory, "fixes the plans' sharding (searched when not given)");
  c->add_flag("--no-sequence-parallel", f->no_sequence_parallel,
              "Plans without sequence parallelism (without either flag, both are searched)")
      ->excludes(c->get_option("--sequence-parallel"));
  c->add_option("--tp-overlap", f->req.tp_overlap, "Fix the TP overlap level (-1: search)");
  c->add_option("--cores", f->cores, "Cores of this machine the actor devices share (cpu)");
  c->add_option("--profile-cache", f->cache, "Where the CPU profile is cached");
  c->add_flag("--json", f->json, "Print one JSON object");
  return [f, nodes] {
    f->nodes_given = int(nodes->count());
    return run_plan(*f);
  };
}

}  // namespace merak::apps
