#include "apps/memory_flags.hpp"

#include <utility>

#include <CLI/CLI.hpp>

#include "core/error.hpp"

namespace merak::apps {

void add_memory_flags(CLI::App* c, memory_flags* f, const std::string& sharding_help) {
  c->add_flag("--use-distributed-optimizer", f->distributed_optimizer,
              "Shard the AdamW moments over the data-parallel replicas (ZeRO-1): gradients "
              "reduce-scattered per bucket, updated weights all-gathered");
  c->add_option("--data-parallel-sharding-strategy", f->sharding,
                "no_shard, optim (= --use-distributed-optimizer), optim_grads or "
                "optim_grads_params; " +
                    sharding_help);
  c->add_flag("--sequence-parallel", f->sequence_parallel,
              "With --tp: norms, residuals and biases on each shard's slice of the tokens; the "
              "TP all-reduces become reduce-scatter / all-gather pairs");
  c->add_option("--recompute-granularity", f->recompute_granularity,
                "Megatron's name: full or selective (the same as --recompute)");
  c->add_flag("--recompute-activations", f->recompute_activations,
              "Megatron's name for --recompute selective");
  c->add_option("--recompute-method", f->recompute_method,
                "Megatron's name: uniform (with --recompute-num-layers: that many transformer "
                "layers per recomputed segment)");
  c->add_option("--recompute-num-layers", f->recompute_num_layers,
                "Transformer layers per recomputed segment under full recomputation (default: "
                "half a layer, the attention or the MLP)");
  c->add_flag("--overlap-param-gather", f->overlap_param_gather,
              "With the distributed optimizer: all-gather the updated weights behind the next "
              "step's forward, each bucket just before the first layer that reads it");
  c->add_flag("--overlap-grad-reduce", f->overlap_grad_reduce,
              "Accepted for Megatron scripts: gradient buckets are always reduced while "
              "backward goes on");
}

partition::sharding_strategy sharding_of(const memory_flags& f) {
  auto s = f.sharding.empty() ? partition::sharding_strategy::no_shard
                              : partition::parse_sharding_strategy(f.sharding);
  if (f.distributed_optimizer) {
    if (!f.sharding.empty() && s != partition::sharding_strategy::optim)
      fail("--use-distributed-optimizer means --data-parallel-sharding-strategy optim (got {})",
           f.sharding);
    s = partition::sharding_strategy::optim;
  }
  return s;
}

std::string recompute_of(const memory_flags& f, const std::string& recompute) {
  std::string out = recompute.empty() ? "none" : recompute;
  for (const auto& [flag, value] :
       {std::pair<std::string, std::string>{"--recompute-granularity", f.recompute_granularity},
        {"--recompute-activations", f.recompute_activations ? "selective" : ""}}) {
    if (value.empty()) continue;
    if (value != "full" && value != "selective")
      fail("{} must be full or selective (got '{}')", flag, value);
    if (out != "none" && out != value) fail("{} {} contradicts --recompute {}", flag, value, out);
    out = value;
  }
  return out;
}

int recompute_layers_of(const memory_flags& f, const std::string& recompute) {
  if (!f.recompute_method.empty() && f.recompute_method != "uniform")
    fail("--recompute-method {}: merak recomputes uniformly (uniform); the first layers of each "
         "stage are --recompute stage-aware",
         f.recompute_method);
  if (f.recompute_method.empty() && f.recompute_num_layers == 0) return 0;
  if (f.recompute_num_layers < 1)
    fail("--recompute-num-layers must be at least 1 (got {})", f.recompute_num_layers);
  if (recompute != "full" && recompute != "stage-aware")
    fail("--recompute-num-layers {} groups the layers full recomputation rebuilds (got "
         "--recompute {})",
         f.recompute_num_layers, recompute);
  return f.recompute_num_layers;
}

}  // namespace merak::apps
