#pragma once
// 3D-parallel training on the actor runtime, in one process or many.
//
// Every (dp replica, pipeline stage, tensor-parallel shard) is a CAF actor
// with its own thread and its own share of the cores; the shards of a stage
// sum partial results over comm/'s in-process transport (Megatron-style
// column/row pairs, optionally sub-pipelined); a reducer actor per (stage,
// shard) sums the replicas' gradients; the calling thread runs the coordinator (coordinator.hpp),
// a blocking actor that feeds micro-batches, collects losses, clips and steps. The
// schedule emerges from the policy (partition/schedule.hpp) each stage runs.
// The global batch of a step is exactly the single-device run's, split over
// the replicas and then into micro-batches, so losses match the single-device
// run up to floating-point summation order.
//
// This header includes no CAF: programs and the command line use it as is.
// A program with an actor system of its own runs the job inside it
// (examples/embed_actor_system).

#include <memory>
#include <string>
#include <vector>

#include "comm/codec.hpp"
#include "model/trainer.hpp"
#include "partition/layout.hpp"
#include "partition/placement.hpp"
#include "partition/recompute.hpp"
#include "partition/schedule.hpp"

namespace caf {
class actor_system;
class actor_system_config;
}  // namespace caf

namespace merak::job {
class bootstrap;
}

namespace merak::actors {

class coordinator;  // coordinator.hpp

// The planner's kinds (partition/recompute.hpp); stage_aware here takes the
// formula, or the least recomputation that fits a memory budget.
using recompute_mode = partition::recompute_kind;

// The layout (partition/layout.hpp: dp, tp, pp, micro-batches, schedule,
// recomputation, TP overlap) and how the runtime runs it.
struct parallel_options : partition::layout {
  // Stage s runs nodes [stage_bounds[s], stage_bounds[s+1]) of the
  // single-device graph (virtual_stages() + 1 entries, 0 first, the node count last; a
  // planner's split). Empty: balanced by forward FLOPs
  // (partition::balanced_stages).
  std::vector<int> stage_bounds;
  double recompute_ratio = 0.75;  // stage 0's share of recomputed layers (stage_aware)
  int64_t memory_budget = 0;      // bytes per stage actor; 0: no limit
  // Compute threads of this process in all (0: the host's cores, split
  // evenly between the job's processes on the host).
  int threads = 0;
  double timeout_s = 300;         // longest wait for any actor before the step fails
  // An idle stage polls its mailbox this long during a step before its thread
  // blocks (waking a blocked thread costs more than the hand-off), and so does the
  // tensor channel of a job of several processes after traffic; -1:
  // automatic, 200 us when the threads that would poll fit on the cores,
  // else 0 (actors/idle_wait.hpp).
  int idle_spin_us = -1;
  // A stage starting an op may borrow the cores of idle stages for it (the
  // pipeline's fill and drain, waits between unequal stages): see
  // actors/core_pool.hpp. Off with tensor parallelism (shards run in step).
  bool lend_cores = true;
  // Processes of one host holding neighbouring pipeline stages pass
  // tensors through rings of shared memory (comm/host_ring.hpp); off: over
  // UCX alone. Every process of a job must agree.
  bool shared_rings = true;
  std::string trace_path;  // Chrome-trace JSON of the last step ("" = none)
  // Data-parallel gradient reduction: buckets of this many bytes, ring
  // all-reduced as backward finishes them; the token embedding's gradient
  // through `sparse` instead (kind dense: the ring too).
  int64_t bucket_bytes = int64_t(4) << 20;
  comm::codec_config sparse;
  // Diagnostic (costs a dense ring of the embedding per step): the reducers
  // also average the embedding's gradient exactly and report the codec's
  // relative L2 error (comm_stats::sparse_rel_error).
  bool measure_sparse_error = false;
  // A job of several processes (merak launch, mpirun, Slurm, merak node):
  // this process is processes->rank() of processes->size(). Every process
  // builds the same layout and hosts the actors `placement` gives it; process
  // 0 also runs the coordinator and the scheduler. Actors message each other
  // across processes over CAF's network layer (process_mesh.hpp); a TP or
  // replica group spread over processes sums over a UCX transport of its own
  // (one member per process). Every process reads the same data, so the run
  // equals the in-process one. Null: every actor in this process.
  std::shared_ptr<job::bootstrap> processes;
  // Which process hosts each actor: "" the default (partition/placement.hpp:
  // TP shards of a stage together, then stages, then replicas, in contiguous
  // blocks), else one rank per actor ("0,0,1,1").
  std::string placement;
  // With train_options::where a device kind without an index given by the
  // user (--device cuda in one process): the process's actors spread over
  // its devices of that kind, actor k on device k mod count.
  bool spread_over_devices = false;
  // The address this process's actors listen on for the job's other
  // processes ("" : 127.0.0.1).
  std::string listen_addr;
  // A process that answers no heartbeat for this long (stopped, hung, cut
  // off) fails the job, named (actors/watchdog.hpp); 0: no heartbeats.
  double heartbeat_s = 5;

  // Throws merak::error naming the flag when the options do not fit the
  // batch (batch must divide into dp x micro-batches) or the placement the
  // processes.
  void validate(int batch) const;
  // Which of `world` processes hosts each stage actor: `placement` when
  // given (one rank per actor: per virtual stage when interleaved), else
  // the default over the devices, a device's chunks on its process.
  partition::placement actor_placement(int world) const;
  // Whether these options need the actor runtime rather than the
  // single-device trainer: a job of several processes, a layout other than
  // one device (dp, tp, pp or micro-batches above 1), a trace, recomputation
  // or a memory budget.
  bool needs_actors() const;
};

// Bytes held, by what holds them (the tensors themselves): a stage actor's,
// or a device's (the largest over devices). With the interleaved schedule a
// device's chunks are stage actors of their own, and their bytes add up
// (the activations' peaks too: at most that).
struct memory_use {
  // Parameter values; under parameter shards this replica's slices plus
  // the most values gathered at once during the step.
  int64_t parameters = 0;
  int64_t gradients = 0;         // parameter gradients and the reducer's bucket buffers
  // The most gradient bytes held at once during the step (whole gradients,
  // bucket copies out to the reducer, gradient shards): under gradient
  // shards, what a backward holds beyond the shards `gradients` counts.
  int64_t gradients_peak = 0;
  int64_t optimizer = 0;         // AdamW moments (this replica's slices when sharded)
  int64_t activations_peak = 0;  // largest activation stash held during the step

  memory_use& operator+=(const memory_use& o) {
    parameters += o.parameters;
    gradients += o.gradients;
    gradients_peak += o.gradients_peak;
    optimizer += o.optimizer;
    activations_peak += o.activations_peak;
    return *this;
  }
  // Each category the larger of this and o.
  void keep_largest(const memory_use& o) {
    parameters = std::max(parameters, o.parameters);
    gradients = std::max(gradients, o.gradients);
    gradients_peak = std::max(gradients_peak, o.gradients_peak);
    optimizer = std::max(optimizer, o.optimizer);
    activations_peak = std::max(activations_peak, o.activations_peak);
  }
};

class parallel_trainer final : public model::training_job {
 public:
  // Loads the data and spawns the actors. Throws merak::error on bad options.
  parallel_trainer(model::train_options opts, parallel_options par);
  parallel_trainer(model::train_options opts, parallel_options par, model::text_corpus corpus);
  parallel_trainer(model::train_options opts, parallel_options par,
                   std::shared_ptr<const model::token_source> corpus);
  // The same inside an actor system the caller owns (configured with
  // configure() before it was made): the job's actors are spawned there, the
  // calling thread is the coordinator, and the destructor ends every actor
  // the job spawned, leaving the system and the caller's actors running.
  parallel_trainer(model::train_options opts, parallel_options par, model::text_corpus corpus,
                   caf::actor_system& system);
  ~parallel_trainer();

  // Registers the job's message types on `cfg` and loads CAF's network
  // layer (for jobs of several processes). Call before making the system
  // that the constructor above takes.
  static void configure(caf::actor_system_config& cfg);

  const model::train_options& options() const override;
  int64_t step() const override;
  // One step of the global batch. Throws merak::error naming the actor and
  // its coordinate if one fails, or the operation that timed out.
  model::step_result train_step() override;
  // Measured bubble of the last step: 1 - busy / (stages x pipeline time),
  // over the stages of replica 0.
  double last_bubble_fraction() const;
  // The most bytes any stage actor held in the last step, per category
  // (each category's largest over the actors).
  const memory_use& last_memory() const;
  // Data-parallel traffic of the last step, counted by the transport:
  // bytes sent by replica 0's reducers (all stages and shards), and the rows
  // of the token embedding's gradient union (sparse codecs; 0 otherwise).
  struct comm_stats {
    uint64_t dp_bytes_per_rank = 0;
    int64_t sparse_union_rows = 0;
    // ||codec result - exact mean|| / ||exact mean|| of the token embedding's
    // gradient on replica 0's first stage (measure_sparse_error; else -1).
    // With error feedback the result includes the fed-back residual and the
    // 1/(1+ω) scaling: it is the error of the gradient actually applied.
    double sparse_rel_error = -1;
  };
  comm_stats last_comm() const;
  // Writes a sharded checkpoint of the current step (each stage actor of
  // replica 0 its own slices, nothing gathered; docs/checkpoint-format.md):
  // it loads under any layout and process count, and on one device.
  // Process 0 only. Returns its directory.
  std::string save() override;
  // Mean validation loss: forwards without gradients on the stage actors of
  // replica 0 (nothing gathered). Every process of a job returns process 0's.
  double validation_loss() override;
  // Process 0 writes the metrics and the checkpoints.
  bool writes_outputs() const override;
  // bubble; dp_bytes_per_rank (dp > 1); sparse_union_rows (a sparse
  // reducer); sparse_rel_error (measure_sparse_error).
  std::vector<std::pair<std::string, double>> step_metrics() const override;
  // The model, layout, stages, schedule and (several processes) placement;
  // then the negotiated recomputation on a second line.
  std::string describe() const override;
  // Stage s runs graph nodes [bounds[s], bounds[s+1]).
  const std::vector<int>& stage_bounds() const;
  // The negotiated recomputation, one entry per stage.
  std::string recompute_plan() const;
  // Which process hosts each actor ("0,0,1,1": partition::placement::str).
  std::string placement() const;

 private:
  std::unique_ptr<coordinator> coordinator_;
};

// The single-device trainer when `par` needs no actors, else the actor
// runtime: what merak train runs. Throws merak::error on bad options.
std::unique_ptr<model::training_job> make_training_job(model::train_options opts,
                                                       parallel_options par);

}  // namespace merak::actors
