#pragma once
// The layout of a parallel run: how many data-parallel replicas, tensor-
// parallel shards and pipeline stages, how a replica's batch splits into
// micro-batches, and how the stages schedule and recompute. The planner's
// plans, the runtime's options and the scheduler actor all hold one.

#include <cstdint>
#include <string>
#include <string_view>

#include "partition/recompute.hpp"
#include "partition/schedule.hpp"

namespace merak::partition {

// How the data-parallel replicas share the model state (Megatron-FSDP's
// --data-parallel-sharding-strategy): no_shard, every replica holds it all;
// optim, the AdamW moments are sharded (Megatron's distributed optimizer,
// ZeRO-1); optim_grads, the gradients too (ZeRO-2); optim_grads_params,
// the parameters too (ZeRO-3 / FSDP).
enum class sharding_strategy { no_shard, optim, optim_grads, optim_grads_params };
const char* sharding_strategy_name(sharding_strategy s);  // "no_shard", "optim", ...
// The inverse; anything else is an error naming the flag and the choices.
sharding_strategy parse_sharding_strategy(std::string_view name);
// Whether a replica keeps only its shard of the gradients (optim_grads,
// optim_grads_params), and of the parameters' values (optim_grads_params).
inline bool shards_gradients(sharding_strategy s) {
  return s == sharding_strategy::optim_grads || s == sharding_strategy::optim_grads_params;
}
inline bool shards_parameters(sharding_strategy s) {
  return s == sharding_strategy::optim_grads_params;
}

struct layout {
  int dp = 1, tp = 1, pp = 1;
  int micro_batches = 1;  // per replica and step
  schedule_kind schedule = schedule_kind::one_f_one_b;
  recompute_kind recompute = recompute_kind::none;
  // Transformer blocks per recomputed segment (--recompute-method uniform
  // --recompute-num-layers N; partition::describe_stage); 0: half a block,
  // the segment between two cut points.
  int recompute_layers = 0;
  int tp_overlap = 0;  // sub-pipelined TP level: 0, 1 or 2 (model::executor::set_tp)
  // Model chunks per pipeline device (the interleaved schedule; 1 for the
  // others): the model splits into pp x chunks virtual stages, virtual stage
  // c x pp + d being chunk c of device d.
  int chunks = 1;
  sharding_strategy sharding = sharding_strategy::no_shard;
  // Sequence parallelism (--sequence-parallel, with tp > 1): the values
  // between the TP pairs split over the shards by tokens.
  bool sequence_parallel = false;
  // --overlap-param-gather (sharded optimizer only): the all-gather of
  // updated values runs behind the next step's forward.
  bool overlap_param_gather = false;

  // Virtual stages: the pipeline's pieces of the model, each a stage actor.
  int virtual_stages() const { return pp * chunks; }
  // Stage actors: one per (replica, virtual stage, shard).
  int actors() const { return dp * tp * pp * chunks; }
  // Sequences in one micro-batch of a global batch of `batch` (which splits
  // into dp x micro_batches equal parts; validate checks).
  int64_t micro_batch_rows(int64_t batch) const { return batch / (int64_t(dp) * micro_batches); }
  // Throws merak::error naming the flag: a count below 1, a TP overlap
  // level outside 0..2, a batch that does not split into dp x
  // micro-batches equal parts, chunks above 1 without the interleaved
  // schedule, or an interleaved layout with chunks < 2, pp < 2,
  // micro-batches not a multiple of pp, or stage-aware recomputation.
  void validate(int64_t batch) const;
  // "recompute=K", K the recomputation `kind` as named, and where it groups
  // whole layers (not "none") " recompute-layers=N".
  std::string recompute_str(std::string_view kind) const;
  // "dp=2 tp=2 pp=2 m=4 1f1b recompute=none tp-overlap=0" (interleaved:
  // "... m=4 interleaved chunks=2 ...")
  std::string str() const;
};

// The micro-batch count for Megatron's --micro-batch-size (a size):
// batch / (dp x size), the inverse of layout::micro_batch_rows. Throws
// merak::error naming the flag when size < 1 or the batch does not split
// into whole micro-batches of that size (`batch_flag` names the batch).
int micro_batches_for_size(int64_t batch, int dp, int size, const char* batch_flag);

}  // namespace merak::partition
