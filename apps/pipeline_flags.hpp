#pragma once
// Megatron-LM's flags for its interleaved pipeline schedule, shared by the
// commands that take a layout (train, plan): where merak says `--schedule
// interleaved --chunks V`, Megatron says
// --num-virtual-stages-per-pipeline-rank V, or
// --num-layers-per-virtual-pipeline-stage N (V = layers / (pp x N)).

namespace CLI {
class App;
}

namespace merak::apps {

struct virtual_pipeline_flags {
  int stages_per_rank = 0;   // --num-virtual-stages-per-pipeline-rank; 0: not given
  int layers_per_stage = 0;  // --num-layers-per-virtual-pipeline-stage; 0: not given
};

// Adds the two flags above to `command` (each excludes the other).
void add_virtual_pipeline_flags(CLI::App* command, virtual_pipeline_flags* flags);

// The model chunks per pipeline stage the flags ask for, 0 when neither is
// given, for a model of `layers` transformer blocks over `pp` stages (0:
// not given). Fails naming the flag and the values where the blocks do not
// split into pp x N-block virtual stages, where pp is not given or below 2,
// or where fewer than 2 chunks a stage would result.
int virtual_pipeline_chunks(const virtual_pipeline_flags& flags, int layers, int pp);

}  // namespace merak::apps
