#include "apps/pipeline_flags.hpp"

#include <CLI/CLI.hpp>

#include "apps/flag_checks.hpp"
#include "core/error.hpp"

namespace merak::apps {

void add_virtual_pipeline_flags(CLI::App* command, virtual_pipeline_flags* flags) {
  auto* per_rank = integer_in(
      command->add_option("--num-virtual-stages-per-pipeline-rank", flags->stages_per_rank,
                          "Megatron-LM's: model chunks per pipeline stage, run by the "
                          "interleaved schedule (= --schedule interleaved --chunks V)"),
      2, 64);
  integer_in(command->add_option("--num-layers-per-virtual-pipeline-stage",
                                 flags->layers_per_stage,
                                 "Megatron-LM's: transformer layers per virtual stage of the "
                                 "interleaved schedule (chunks = layers / (pp x this))"),
             1, 1 << 20)
      ->excludes(per_rank);
}

int virtual_pipeline_chunks(const virtual_pipeline_flags& flags, int layers, int pp) {
  if (flags.stages_per_rank > 0) {
    if (pp == 1)
      fail("--num-virtual-stages-per-pipeline-rank {} needs --pipeline-model-parallel-size 2 or "
           "more (got 1)",
           flags.stages_per_rank);
    return flags.stages_per_rank;
  }
  const int n = flags.layers_per_stage;
  if (n == 0) return 0;
  if (pp < 2)
    fail("--num-layers-per-virtual-pipeline-stage {} needs --pipeline-model-parallel-size 2 or "
         "more{}",
         n, pp == 1 ? " (got 1)" : " (not given)");
  if (layers % (int64_t(pp) * n) != 0)
    fail("--num-layers-per-virtual-pipeline-stage {}: --num-layers {} does not split into "
         "--pipeline-model-parallel-size {} x virtual stages of {} layers",
         n, layers, pp, n);
  const int chunks = layers / (pp * n);
  if (chunks < 2)
    fail("--num-layers-per-virtual-pipeline-stage {} with --num-layers {} over "
         "--pipeline-model-parallel-size {} gives one chunk a stage: the interleaved schedule "
         "needs 2 or more (leave the flag out for 1F1B)",
         n, layers, pp);
  return chunks;
}

}  // namespace merak::apps
