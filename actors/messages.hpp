#pragma once
// Message vocabulary of the training actors (CAF 0.17): one struct per
// message, each with inspect() so that it crosses processes, and one typed
// interface per role, so that a message an actor does not handle is a
// compile error rather than a silent drop. Included only by actors/*.cpp.
//
// Roles and what they receive (the protocols are drawn in stage_actor.hpp,
// scheduler_actor.hpp, reducer_actor.hpp, process_mesh.hpp, watchdog.hpp):
//   stage_api        a pipeline stage's TP shard of one replica
//   reducer_api      the data-parallel reducer of one stage shard
//   scheduler_api    the job's scheduler (policies, recomputation)
//   coordinator_api  process 0's driver of the steps (a scoped actor)
//   process_api      the driver of every other process (a scoped actor)
//   directory_api    a process's entry point for joining the job
//   watchdog_api     a process's heartbeats
//
// Tensors travel as tensor_ref: a shared handle, so moving one between actors
// of a process never copies the data. Its inspect() writes the shape, the
// element type and the bytes as one block, ready for crossing processes.

#include <caf/all.hpp>

#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "actors/inspect.hpp"
#include "actors/parallel_trainer.hpp"
#include "core/trace.hpp"
#include "model/sharded_checkpoint.hpp"
#include "model/tensor.hpp"
#include "model/trainer.hpp"
#include "partition/recompute.hpp"
#include "partition/schedule.hpp"

namespace merak::actors {

struct tensor_ref {
  std::shared_ptr<model::tensor> t;
  static tensor_ref make(model::tensor&& x) {
    return {std::make_shared<model::tensor>(std::move(x))};
  }
  // Takes the tensor out if this is the only handle, else copies it.
  model::tensor take() const {
    if (t.use_count() == 1) return std::move(*t);
    return t->clone();
  }
};

// Where an actor sits in the layout.
struct actor_coord {
  int dp = 0, stage = 0, tp = 0;
};

// The kinds of tensor a stage hands on. The tensor channel's label carries
// one as its number (comm::tensor_label::kind).
enum class tensor_kind : uint8_t {
  input = 0,  // an activation (or a graph input) of a training forward
  grad = 1,   // the gradient of an output, for backward
  eval = 2,   // an input of a validation forward
};
// The kind numbered `number`; nullopt for a number that names none.
inline std::optional<tensor_kind> tensor_kind_of(int64_t number) {
  if (number < 0 || number > int64_t(tensor_kind::eval)) return std::nullopt;
  return tensor_kind(number);
}

// -- Stage ------------------------------------------------------------------
struct stage_wiring;
struct stage_plan;
struct step_start;
struct stage_tensor;
struct pump_next;
struct tp_command;
struct chunk_ready;
struct chunk_command;
struct chunk_done;
struct tied_gradient;
struct bucket_reduced;
struct bucket_gathered;
struct apply_update;
struct save_shard;
struct restore_shard;
using stage_api = caf::typed_actor<
    caf::reacts_to<stage_wiring>, caf::reacts_to<stage_plan>, caf::reacts_to<step_start>,
    caf::reacts_to<stage_tensor>, caf::reacts_to<pump_next>, caf::reacts_to<tp_command>,
    caf::reacts_to<chunk_ready>, caf::reacts_to<chunk_command>, caf::reacts_to<chunk_done>,
    caf::reacts_to<tied_gradient>, caf::reacts_to<bucket_reduced>, caf::reacts_to<bucket_gathered>,
    caf::reacts_to<apply_update>, caf::reacts_to<save_shard>, caf::reacts_to<restore_shard>>;

// -- Reducer ----------------------------------------------------------------
struct reduce_bucket;
struct gather_bucket;
using reducer_api = caf::typed_actor<caf::reacts_to<reduce_bucket>, caf::reacts_to<gather_bucket>>;

// -- Scheduler --------------------------------------------------------------
struct scheduler_wiring;
struct memory_report;
using scheduler_api =
    caf::typed_actor<caf::reacts_to<scheduler_wiring>, caf::reacts_to<memory_report>>;

// -- Coordinator and the other processes' drivers ---------------------------
struct micro_batch_loss;
struct stage_ready;
struct stage_trace;
struct stage_applied;
struct eval_loss;
struct shard_saved;
struct shard_restored;
struct plan_ready;
struct job_failed;
struct join_job;
struct step_done;
struct validation_done;
struct resume_at;
struct job_finished;
using coordinator_api =
    caf::typed_actor<caf::reacts_to<micro_batch_loss>, caf::reacts_to<stage_ready>,
                     caf::reacts_to<stage_trace>, caf::reacts_to<stage_applied>,
                     caf::reacts_to<eval_loss>, caf::reacts_to<shard_saved>,
                     caf::reacts_to<shard_restored>, caf::reacts_to<plan_ready>,
                     caf::reacts_to<job_failed>, caf::reacts_to<join_job>>;
using process_api = caf::typed_actor<caf::reacts_to<step_done>, caf::reacts_to<validation_done>,
                                     caf::reacts_to<resume_at>, caf::reacts_to<job_finished>,
                                     caf::reacts_to<job_failed>, caf::reacts_to<join_job>>;
// What both drivers take: failures (from actors, watchdogs, the channel)
// and joins (from the directory).
using failure_api = caf::typed_actor<caf::reacts_to<job_failed>>;
using join_api = caf::typed_actor<caf::reacts_to<join_job>>;
using directory_api = join_api;

// -- Watchdog ---------------------------------------------------------------
struct ping;
struct pong;
struct watch_peers;
struct watch_tick;
using watchdog_api = caf::typed_actor<caf::replies_to<ping>::with<pong>,
                                      caf::reacts_to<watch_peers>, caf::reacts_to<watch_tick>>;

// -- The messages -------------------------------------------------------------

// coordinator -> stage, before anything else.
struct stage_wiring {
  std::vector<stage_api> line;  // this replica's stages of this TP rank, by stage
  reducer_api reducer;          // null without data parallelism
  coordinator_api coordinator;
  scheduler_api scheduler;
  std::vector<stage_api> tp_peers;  // the shards of this stage, by TP rank
};

// scheduler -> stage, once: its schedule policy and how many of its first
// segments it checkpoints.
struct stage_plan {
  partition::stage_policy policy;
  int checkpoint_nodes = 0;
  bool selective = false;  // the attention cores of the kept segments recomputed
};

// coordinator -> stage: a training step starts.
struct step_start {
  int64_t step = 0;
};

// An activation, gradient or validation input (`kind`) of micro-batch (or
// validation sequence number) `mb` for the receiver's input value `value`,
// from the stage that computed it or the coordinator.
struct stage_tensor {
  tensor_kind kind = tensor_kind::input;
  int mb = 0;
  int value = 0;
  tensor_ref x;
};

// stage -> itself: pick the next op once the mailbox was read.
struct pump_next {};

// TP shard 0 -> the other shards of its stage: run this op next.
struct tp_command {
  partition::op op{partition::op_kind::F, 0};
};

// Interleaved schedule: the chunk-0 actor of a pipeline device (TP shard 0)
// decides the ops of all the device's chunks.
// Chunk c > 0 -> the device's chunk 0: every input (tensor_kind::input) or
// every output gradient (tensor_kind::grad) of micro-batch `mb` of chunk
// `chunk` is here.
struct chunk_ready {
  tensor_kind kind = tensor_kind::input;
  int mb = 0;
  int chunk = 0;
};
// The device's chunk 0 -> chunk op.chunk: run this op now (its inputs are
// there); the device runs nothing else until chunk_done.
struct chunk_command {
  partition::op op{partition::op_kind::F, 0};
};
// Chunk c > 0 -> the device's chunk 0: the commanded op has finished.
struct chunk_done {
  partition::op op{partition::op_kind::F, 0};
};

// Tied weights: a holder -> the owner stage (its gradient), then the owner ->
// each holder (the sum).
struct tied_gradient {
  std::string name;
  int from_stage = 0;
  tensor_ref grad;
};

// reducer -> stage: bucket `bucket` summed over the replicas.
struct bucket_reduced {
  int bucket = 0;
  tensor_ref sum;
  uint64_t bytes_sent = 0;  // by the reducer, all steps
  int64_t union_rows = 0;   // of the last sparse bucket
  double rel_error = -1;    // of the sparse codec (-1: not measured)
  trace_slice slice;        // the reduction's, for the trace
};

// reducer -> stage: every replica's shard of bucket `bucket`'s updated
// values (the distributed optimizer).
struct bucket_gathered {
  int bucket = 0;
  tensor_ref flat;
};

// coordinator -> stage: take the optimizer step.
struct apply_update {
  float lr = 0;
  float clip = 1;     // the global-norm clip factor
  bool skip = false;  // a skipped step: drop the gradients, keep weights and moments
};

// coordinator -> stage of replica 0 (of every replica under the distributed
// optimizer, each writing its moments' slices): write this shard into the
// checkpoint being assembled in `dir`.
struct save_shard {
  std::string dir;
  model::metadata_map meta;
};

// coordinator -> stage: load this shard's part of checkpoint `dir`.
struct restore_shard {
  std::string dir;
};

// stage -> its reducer: a bucket of final gradients. rows x cols > 0 marks
// the sparse bucket; known_rows hold every non-zero row of it (increasing;
// empty: the codec scans). The reducer answers `stage`.
// With `scatter` the replicas reduce-scatter the bucket instead
// (comm::reduce_scatter_sum): only this replica's shard of `flat` comes back
// summed (the distributed optimizer).
struct reduce_bucket {
  int bucket = 0;
  tensor_ref flat;
  int64_t rows = 0, cols = 0;
  std::vector<int> known_rows;
  stage_api stage;
  bool scatter = false;
};

// stage -> its reducer: all-gather `flat` (floats; this replica's shard,
// comm::shard_range, is its own), answered with bucket_gathered, or with
// `fetch` (--overlap-param-gather, parameter shards) counted in the
// reducer's count_progress of fetches (actors/param_gather.hpp) instead.
// With `bf16`, as comm::allgather_shards_bf16: bf16 on the wire except the
// element ranges in `exact` (begin, end, begin, end, ...).
struct gather_bucket {
  int bucket = 0;
  tensor_ref flat;
  stage_api stage;
  bool fetch = false;
  bool bf16 = false;
  std::vector<int64_t> exact;
};

// coordinator -> scheduler: every stage shard, [dp x tp][pp].
struct scheduler_wiring {
  std::vector<stage_api> stages;
  coordinator_api coordinator;
};

// stage (replica 0, TP shard 0) -> scheduler: what its memory holds.
struct memory_report {
  partition::stage_memory memory;
};

// The loss stage (TP shard 0) -> coordinator, per micro-batch.
struct micro_batch_loss {
  int dp = 0, mb = 0;
  double loss = 0;
};

// stage -> coordinator: its gradients are final (reduced, ties settled).
struct stage_ready {
  actor_coord who;
  double grad_sumsq = 0;  // its share of the global norm's square
  double busy_s = 0;      // computing, this step
  uint64_t dp_bytes = 0;  // the reducer's bytes since the last report
  int64_t sparse_union_rows = 0;
  double sparse_rel_error = -1;
  memory_use memory;
};

// stage -> coordinator, before stage_ready (with --trace): its step.
struct stage_trace {
  actor_coord who;
  trace_track ops, reductions, tp_sums;
};

// stage -> coordinator: the optimizer step is done.
struct stage_applied {
  actor_coord who;
  trace_slice adamw;
};

// The loss stage (TP shard 0) of replica 0 -> coordinator: validation
// forward `seq`'s loss.
struct eval_loss {
  int seq = 0;
  double loss = 0;
};

// stage -> coordinator: its shard file is written.
struct shard_saved {
  actor_coord who;
  std::vector<model::shard_record> records;
  int64_t adam_t = 0;
};

// stage -> coordinator: its part of the checkpoint is loaded.
struct shard_restored {
  actor_coord who;
};

// scheduler -> coordinator: every stage has its plan.
struct plan_ready {
  std::string summary;
};

// Anyone -> a driver: the job cannot go on, because `what`.
struct job_failed {
  std::string what;
};

// Between the processes' drivers through the directories (process_mesh.hpp):
// what process `rank` hosts. `home` is its driver (coordinator_api on
// process 0, process_api elsewhere).
struct join_job {
  int rank = 0;
  std::vector<stage_api> stages;
  std::vector<reducer_api> reducers;  // parallel to stages; null where none
  caf::actor home;
  watchdog_api watchdog;
};

// coordinator -> every other process, after each step.
struct step_done {
  model::step_result result;
  double bubble = 0;
  parallel_trainer::comm_stats comm;
  memory_use memory;
};

// coordinator -> every other process: the validation loss.
struct validation_done {
  double loss = 0;
};

// coordinator -> every other process: the job resumed after step `step`.
struct resume_at {
  int64_t step = 0;
};

// coordinator -> every other process: the job is over.
struct job_finished {};

struct ping {};
struct pong {};

// Starts a watchdog on other processes' watchdogs (named by `names` in
// failures): a ping every period, a failure after `limit` of silence.
struct watch_peers {
  std::vector<watchdog_api> peers;
  std::vector<std::string> names;
  int64_t period_ms = 1000, limit_ms = 5000;
};

// watchdog -> itself: a period passed.
struct watch_tick {};

// -- inspect() ----------------------------------------------------------------

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, tensor_ref& x) {
  std::vector<int64_t> shape;
  uint8_t type = 0;
  actors::wire_bytes data;
  if (x.t) {
    shape = x.t->shape();
    type = uint8_t(x.t->type());
    if (Inspector::reads_state)
      data.bytes.assign(reinterpret_cast<const char*>(x.t->raw()),
                        reinterpret_cast<const char*>(x.t->raw()) + x.t->bytes());
  }
  auto load = caf::meta::load_callback([&]() -> caf::error {
    // The shape and type must account for exactly the bytes that came,
    // checked before the tensor is allocated.
    if (type >= model::kdtype_count) return caf::sec::invalid_argument;
    uint64_t n = 1;
    for (int64_t d : shape) {
      if (d < 0 || (d > 0 && n > actors::kmax_wire_bytes / uint64_t(d)))
        return caf::sec::invalid_argument;
      n *= uint64_t(d);
    }
    if (n * model::dtype_size(model::dtype(type)) != data.bytes.size())
      return caf::sec::invalid_argument;
    auto t = std::make_shared<model::tensor>(shape, model::dtype(type));
    if (!data.bytes.empty()) std::memcpy(t->raw(), data.bytes.data(), data.bytes.size());
    x.t = std::move(t);
    return caf::none;
  });
  return f(caf::meta::type_name("merak.tensor_ref"), shape, type, data, load);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, actor_coord& x) {
  return f(caf::meta::type_name("merak.actor_coord"), x.dp, x.stage, x.tp);
}

MERAK_INSPECT(stage_wiring, x.line, x.reducer, x.coordinator, x.scheduler, x.tp_peers)
MERAK_INSPECT(stage_plan, x.policy, x.checkpoint_nodes, x.selective)
MERAK_INSPECT(step_start, x.step)
// The kind travels as its number and is checked on arrival.
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, stage_tensor& x) {
  uint8_t kind = uint8_t(x.kind);
  auto load = caf::meta::load_callback([&]() -> caf::error {
    auto known = tensor_kind_of(kind);
    if (!known) return caf::sec::invalid_argument;
    x.kind = *known;
    return caf::none;
  });
  return f(caf::meta::type_name("merak.stage_tensor"), kind, x.mb, x.value, x.x, load);
}
MERAK_INSPECT(pump_next)
MERAK_INSPECT(tp_command, x.op)
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, chunk_ready& x) {
  uint8_t kind = uint8_t(x.kind);
  auto load = caf::meta::load_callback([&]() -> caf::error {
    auto known = tensor_kind_of(kind);
    if (!known || *known == tensor_kind::eval) return caf::sec::invalid_argument;
    x.kind = *known;
    return caf::none;
  });
  return f(caf::meta::type_name("merak.chunk_ready"), kind, x.mb, x.chunk, load);
}
MERAK_INSPECT(chunk_command, x.op)
MERAK_INSPECT(chunk_done, x.op)
MERAK_INSPECT(tied_gradient, actors::text_ref{x.name}, x.from_stage, x.grad)
MERAK_INSPECT(bucket_reduced, x.bucket, x.sum, x.bytes_sent, x.union_rows, x.rel_error, x.slice)
MERAK_INSPECT(apply_update, x.lr, x.clip, x.skip)
MERAK_INSPECT(save_shard, text_ref{x.dir}, x.meta)
MERAK_INSPECT(restore_shard, text_ref{x.dir})
MERAK_INSPECT(reduce_bucket, x.bucket, x.flat, x.rows, x.cols, x.known_rows, x.stage, x.scatter)
MERAK_INSPECT(gather_bucket, x.bucket, x.flat, x.stage, x.fetch, x.bf16, x.exact)
MERAK_INSPECT(bucket_gathered, x.bucket, x.flat)
MERAK_INSPECT(scheduler_wiring, x.stages, x.coordinator)
MERAK_INSPECT(memory_report, x.memory)
MERAK_INSPECT(micro_batch_loss, x.dp, x.mb, x.loss)
MERAK_INSPECT(memory_use, x.parameters, x.gradients, x.gradients_peak, x.optimizer,
              x.activations_peak)
MERAK_INSPECT(stage_ready, x.who, x.grad_sumsq, x.busy_s, x.dp_bytes, x.sparse_union_rows,
              x.sparse_rel_error, x.memory)
MERAK_INSPECT(stage_trace, x.who, x.ops, x.reductions, x.tp_sums)
MERAK_INSPECT(stage_applied, x.who, x.adamw)
MERAK_INSPECT(eval_loss, x.seq, x.loss)
MERAK_INSPECT(shard_saved, x.who, x.records, x.adam_t)
MERAK_INSPECT(shard_restored, x.who)
MERAK_INSPECT(plan_ready, text_ref{x.summary})
MERAK_INSPECT(job_failed, text_ref{x.what})
MERAK_INSPECT(join_job, x.rank, x.stages, x.reducers, x.home, x.watchdog)
MERAK_INSPECT(step_done, x.result, x.bubble, x.comm, x.memory)
MERAK_INSPECT(validation_done, x.loss)
MERAK_INSPECT(resume_at, x.step)
MERAK_INSPECT(job_finished)
MERAK_INSPECT(ping)
MERAK_INSPECT(pong)
MERAK_INSPECT(watch_peers, x.peers, x.names, x.period_ms, x.limit_ms)
MERAK_INSPECT(watch_tick)

// Registers every message and payload type of this file (a system whose
// actors talk to other processes needs them all).
void add_message_types(caf::actor_system_config& cfg);

}  // namespace merak::actors

// Payload types of other modules, inspected where they are declared.
namespace merak {
MERAK_INSPECT(trace_slice, actors::text_ref{x.name}, x.start, x.end)
}  // namespace merak

namespace merak::model {
MERAK_INSPECT(shard_spec, x.dim, x.parts, x.index, x.groups, x.full, x.blocks, x.unit)
MERAK_INSPECT(shard_record, actors::text_ref{x.file}, actors::text_ref{x.name}, x.spec, x.full,
              x.moment_piece, x.begin, x.end, x.with_values)
MERAK_INSPECT(step_result, x.step, x.loss, x.lr, x.grad_norm, x.step_s, x.tokens_per_s, x.forward_s,
              x.backward_s, x.optimizer_s, x.skipped)
}  // namespace merak::model

namespace merak::partition {
MERAK_INSPECT(stage_memory, x.stage, x.weights_bytes, x.tied_params, x.segment_nodes,
              x.stash_bytes, x.checkpoint_bytes, x.core_bytes, x.input_bytes, x.output_bytes,
              x.in_flight, x.awaiting_weights, x.weight_bytes, x.whole_prefix)
MERAK_INSPECT(stage_policy, x.stage, x.stages, x.micro_batches, x.limited, x.warm, x.steady,
              x.forward_first, x.pre, x.recompute_in_backward, x.split_weight, x.chunks,
              x.order)

// The kind travels as its number and is checked on arrival.
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, op& x) {
  uint8_t kind = uint8_t(x.kind);
  auto load = caf::meta::load_callback([&]() -> caf::error {
    if (kind > uint8_t(op_kind::W)) return caf::sec::invalid_argument;
    x.kind = op_kind(kind);
    return caf::none;
  });
  return f(caf::meta::type_name("merak.op"), kind, x.mb, x.chunk, load);
}
}  // namespace merak::partition

namespace merak::actors {
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, parallel_trainer::comm_stats& x) {
  return f(caf::meta::type_name("merak.comm_stats"), x.dp_bytes_per_rank, x.sparse_union_rows,
           x.sparse_rel_error);
}
}  // namespace merak::actors
