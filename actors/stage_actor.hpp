#pragma once
// The pipeline stage actor: one per (dp rank, pipeline stage). Included only
// by actors/*.cpp (it names CAF types).
//
// Protocol of one step (arrows are messages):
//
//   stage --memory--> scheduler --plan(policy, checkpoint)--> stage   (once)
//   coordinator --step--> stage            reset the schedule
//   coordinator/upstream --input(mb, v, x)--> stage
//   downstream --grad(mb, v, dx)--> stage
//   stage runs F/Fpc/R/B as its stage_scheduler allows, sending activations
//   downstream, input gradients upstream and per-micro-batch losses to the
//   coordinator;
//     [dp > 1]  during the last micro-batch's backward, as gradients become
//               final: stage --reduce(bucket, flat, rows, cols, known rows)-->
//               its reducer --reduced(bucket, sum, bytes, union rows, rel
//               error, slice)--> stage
//               (reducer_actor.hpp; the rest of backward runs meanwhile)
//   when every backward is done and every bucket is back:
//     [tied weights]  non-owner --tie(name, g)--> owner --tie(name, sum)--> non-owner
//     stage --ready(dp, s, tp, sum of squares, busy, bytes, union rows,
//                   sparse rel error)--> coordinator
//   coordinator --apply(lr, clip)--> stage --applied--> coordinator
//
// Tensor parallelism: the shards of a stage sum partial results over comm/
// (blocking their own threads, never a CAF worker), so they must run the
// same ops in the same order. Shard 0 of each stage decides (its
// stage_scheduler) and tells the others, which run each op once its inputs
// are there:
//   tp rank 0 --op(kind, mb)--> tp ranks 1..tp-1 of the same stage
//
// Any exception ends the actor after telling the coordinator what failed and
// where (`failed`); the coordinator also monitors every stage.

#include <caf/all.hpp>

#include <string>
#include <vector>

#include "actors/core_pool.hpp"
#include "comm/tensor_channel.hpp"
#include "comm/transport.hpp"
#include "model/adamw.hpp"
#include "model/graph.hpp"
#include "partition/schedule.hpp"

namespace merak::actors {

struct stage_setup {
  int dp_rank = 0, dp = 1;
  int stage = 0, pp = 1;
  int tp_rank = 0, tp = 1;
  // This shard's endpoint of the stage's TP group (tp > 1), and the
  // sub-pipelining level (model::executor::set_tp).
  std::shared_ptr<comm::transport> tp_link;
  int tp_overlap = 0;
  const model::graph* graph = nullptr;  // this TP shard's rewrite of the model
  int first = 0, last = 0;              // node range
  uint64_t seed = 0;
  model::adamw_config adam;
  partition::stage_policy
      policy;            // stage, stages, micro-batches; the rest comes from the scheduler
  float loss_scale = 1;  // 1 / (dp x micro-batches): the global mean
  int64_t tokens_per_micro_batch = 0;  // for the memory report
  int threads = 1;
  // Idle polling before blocking (idle_wait.hpp): -1 = automatic, from the
  // number of threads of the whole run that want a core.
  int spin_us = -1;
  int busy_threads = 1;
  // Idle cores of the process this stage may borrow for an op (core_pool.hpp;
  // null: never), and at most how many.
  std::shared_ptr<core_pool> cores;
  int core_index = 0;  // local replica x pp + stage
  // Reports the stage's memory to the scheduler actor (one shard of one
  // replica per stage in each process).
  bool reports_memory = false;
  int max_borrow = 0;
  // Routing, by value id: which stage produces each input (-1: the
  // coordinator), which stages read each output.
  std::vector<int> input_producer;               // parallel to executor inputs
  std::vector<std::vector<int>> output_readers;  // parallel to executor outputs
  // Parameters shared with other stages (tied weights): name, owner stage,
  // the other holders.
  struct tie {
    std::string name;
    int owner;
    std::vector<int> holders;
  };
  std::vector<tie> ties;
  // Stages of this line (this replica and TP rank) on other processes get
  // their activations and gradients through the process's tensor channel:
  // line_rank[s] is stage s's process (-1: this one) and line_index[s] its
  // placement index (the channel's destination label).
  std::shared_ptr<comm::tensor_channel> channel;
  std::vector<int> line_rank, line_index;
  bool trace = false;
  // Data parallelism: bucket size, and the parameter (the token embedding)
  // whose gradient goes alone through the reducer's sparse codec ("" none).
  int64_t bucket_bytes = int64_t(4) << 20;
  std::string sparse_param;
};

// Spawns a stage actor on its own thread; it waits for `wire` before anything:
//   wire(stages of my replica and TP rank [pp], reducer, coordinator,
//        scheduler, my TP peers [tp])
caf::actor spawn_stage(caf::actor_system& sys, stage_setup setup);

}  // namespace merak::actors
