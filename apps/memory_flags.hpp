#pragma once
// The memory strategies' flags, shared by the commands that take a layout
// (train, plan), with Megatron-LM's names: --use-distributed-optimizer,
// --data-parallel-sharding-strategy, --sequence-parallel, and the
// Megatron spellings of selective and full recomputation
// (--recompute-granularity, --recompute-activations).

#include <string>

#include "partition/layout.hpp"

namespace CLI {
class App;
}

namespace merak::apps {

struct memory_flags {
  bool distributed_optimizer = false;  // --use-distributed-optimizer
  std::string sharding;                // --data-parallel-sharding-strategy; "": not given
  bool sequence_parallel = false;      // --sequence-parallel
  std::string recompute_granularity;   // "": not given
  bool recompute_activations = false;
  bool overlap_grad_reduce = true;  // accepted; always the case
  bool overlap_param_gather = false;  // --overlap-param-gather
  std::string recompute_method;       // --recompute-method; "": not given
  int recompute_num_layers = 0;       // --recompute-num-layers; 0: not given
};

// Adds the flags above to `command`; `sharding_help` ends the help of
// --data-parallel-sharding-strategy (which strategies the command runs).
void add_memory_flags(CLI::App* command, memory_flags* flags, const std::string& sharding_help);

// The sharding strategy the flags ask for (no_shard when none); a
// contradiction or a bad name fails naming the flag.
partition::sharding_strategy sharding_of(const memory_flags& flags);

// The recomputation `--recompute` names once Megatron's spellings are
// applied ("none" when none is given): --recompute-granularity full|selective
// and --recompute-activations (selective) must agree with it.
std::string recompute_of(const memory_flags& flags, const std::string& recompute);

// Transformer blocks per recomputed segment (partition::layout::
// recompute_layers; 0 when not given): --recompute-num-layers N with
// --recompute-method uniform (the only method; block, Megatron's first-N-
// layers-of-each-stage, is what --recompute stage-aware plans per stage).
// Fails naming the flag on another method, N < 1, or N without full
// recomputation (`recompute`, as recompute_of gives it).
int recompute_layers_of(const memory_flags& flags, const std::string& recompute);

}  // namespace merak::apps
