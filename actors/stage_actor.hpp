#pragma once
// The pipeline stage actor: one per (dp rank, pipeline stage). Included only
// by actors/*.cpp (it names CAF types).
//
// Protocol of one step (arrows are messages, messages.hpp):
//
//   coordinator --stage_wiring--> stage                               (once)
//   stage --memory_report--> scheduler --stage_plan--> stage           (once)
//   coordinator --step_start--> stage            reset the schedule
//   coordinator/upstream --stage_tensor(tensor_kind::input, mb, value, x)--> stage
//   downstream --stage_tensor(tensor_kind::grad, mb, value, dx)--> stage
//   stage runs F/Fpc/R/B as its stage_scheduler allows, sending activations
//   downstream, input gradients upstream and micro_batch_loss to the
//   coordinator;
//     [dp > 1]  during the last micro-batch's backward, as gradients become
//               final: stage --reduce_bucket--> its reducer
//               --bucket_reduced--> stage (reducer_actor.hpp; the rest of
//               backward runs meanwhile)
//   when every backward is done and every bucket is back:
//     [tied weights]  holder --tied_gradient--> owner --tied_gradient(sum)--> holder
//     stage --stage_trace (with --trace), stage_ready--> coordinator
//   coordinator --apply_update--> stage --stage_applied--> coordinator
//
// Validation (replica 0): coordinator/upstream --stage_tensor(tensor_kind::eval, seq,
// value, x)--> stage; the loss stage --eval_loss--> coordinator.
// Checkpoints: coordinator --save_shard--> stage of replica 0
// --shard_saved--> coordinator; coordinator --restore_shard--> every stage
// --shard_restored--> coordinator.
//
// Tensor parallelism: the shards of a stage sum partial results over comm/
// (blocking their own threads, never a CAF worker), so they must run the
// same ops in the same order. Shard 0 of each stage decides (its
// stage_scheduler) and tells the others, which run each op once its inputs
// are there:
//   tp rank 0 --tp_command(op)--> tp ranks 1..tp-1 of the same stage
//
// Interleaved schedule: each virtual stage c x devices + d (chunk c of
// pipeline device d) is a stage actor; the device's chunk-0 actor (TP shard
// 0) runs the stage_scheduler of all its chunks, so the device runs one op
// at a time in the schedule's order:
//   chunk c --chunk_ready(kind, mb, c)--> chunk 0       (inputs / gradients here)
//   chunk 0 --chunk_command(op)--> chunk op.chunk       (run it now)
//   chunk c --chunk_done(op)--> chunk 0                 (the device is free)
// A commanded chunk is a TP leader for its own shards (tp_command). Each
// chunk keeps its own weights, gradient buckets, tied weights and shard
// file, exactly as a stage.
//
// Any exception ends the actor after telling the coordinator what failed and
// where (job_failed); the coordinator also monitors every stage.

#include <caf/all.hpp>

#include <string>
#include <vector>

#include "actors/core_pool.hpp"
#include "actors/messages.hpp"
#include "actors/param_gather.hpp"
#include "comm/tensor_channel.hpp"
#include "comm/transport.hpp"
#include "model/adamw.hpp"
#include "model/graph.hpp"
#include "partition/routing.hpp"
#include "partition/schedule.hpp"

namespace merak::actors {

struct stage_setup {
  int dp_rank = 0, dp = 1;
  // The virtual stage and how many there are (pipeline devices x chunks).
  int stage = 0, pp = 1;
  int chunks = 1;  // model chunks per pipeline device (interleaved)
  // Where this actor's parameters and activations live.
  model::device where = model::device::cpu();
  int tp_rank = 0, tp = 1;
  // This shard's endpoint of the stage's TP group (tp > 1), and the
  // sub-pipelining level (model::executor::set_tp).
  std::shared_ptr<comm::transport> tp_link;
  // The stage's reducer's endpoint (dp > 1): labelled with the step like
  // tp_link, for the collectives' sequence check (transport::set_step).
  std::shared_ptr<comm::transport> dp_link;
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
  int core_index = 0;  // local replica x pp + stage (interleaved: its pipeline device's)
  // Reports the stage's memory to the scheduler actor (one shard of one
  // replica per stage in each process).
  bool reports_memory = false;
  int max_borrow = 0;
  // Which stage produces each input, which read each output, the tied
  // weights this stage holds (partition/routing.hpp).
  partition::stage_route route;
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
  // With dp > 1: the AdamW moments sharded over the replicas
  // (model/distributed_adamw.hpp): buckets reduce-scattered, the updated
  // values all-gathered. On a device, its state stays in host memory.
  bool distributed_optimizer = false;
  // Set for gradient shards (ZeRO stage 2, optim_grads, dp > 1): every
  // micro-batch's buckets are reduce-scattered as its backward ends and
  // summed into the optimizer's gradient shards; the parameters' whole
  // gradients and the bucket buffers are released after (the executor
  // makes them zeros again at the next backward). The reducer's count of
  // finished reductions, for a backward that waits once buckets pile up.
  std::shared_ptr<count_progress> reductions;
  // Set when the stage takes all-gathered values only just before a node
  // reads them (dp > 1): under --overlap-param-gather (the step ends once
  // its all-gathers are started) and under parameter shards. The reducer
  // counts each all-gather handed to it with `fetch` here, in order.
  std::shared_ptr<count_progress> fetched;
  // Parameter shards (ZeRO stage 3, optim_grads_params; gradient shards
  // too): each replica keeps its slice of the values, and every node's
  // buckets are gathered just before it runs (model/parameter_fetch.hpp).
  bool shard_parameters = false;
  // Selective recomputation: the attention cores recomputed in backward.
  bool recompute_attention = false;
  // Transformer blocks per recomputed segment (0: half a block; the
  // segments partition::describe_stage makes, which the scheduler plans by).
  int recompute_layers = 0;
};

// Spawns a stage actor on its own thread; it waits for stage_wiring before
// anything.
stage_api spawn_stage(caf::actor_system& sys, stage_setup setup);

}  // namespace merak::actors
