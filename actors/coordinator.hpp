#pragma once
// The coordinator of a training job on the actor runtime: the actor that
// parallel_trainer (a facade over it) runs on its caller's thread. On
// process 0 it spawns and wires every stage, reducer and scheduler actor,
// feeds micro-batches, collects losses and gradient norms, clips and steps,
// saves and validates; on every other process it hosts that process's own
// actors and follows process 0's steps. It is a blocking actor (a
// caf::scoped_actor): each step is a sequence of waits, every one bounded
// by the step timeout and failing with what it waited for.
//
// Its source files: coordinator.cpp (start, steps, end),
// coordinator_processes.cpp (what a job of several processes needs: core
// lending across a host, the tensor channel, groups over UCX) and
// coordinator_checkpoints.cpp (sharded checkpoints, validation). Included
// only by those and parallel_trainer.cpp (it names CAF types).

#include "actors/actor_errors.hpp"
#include "actors/parallel_trainer.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <unistd.h>
#include <array>
#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <thread>
#include "actors/messages.hpp"
#include "actors/process_mesh.hpp"
#include "actors/reducer_actor.hpp"
#include "actors/scheduler_actor.hpp"
#include "actors/stage_actor.hpp"
#include "actors/watchdog.hpp"
#include "comm/group.hpp"
#include "comm/inproc.hpp"
#include "job/bootstrap.hpp"
#ifdef MERAK_WITH_UCX
#include "comm/ucx_transport.hpp"
#endif
#include "core/error.hpp"
#include "core/shared_memory.hpp"
#include "model/checkpoint.hpp"
#include "model/executor.hpp"
#include "model/gemm.hpp"
#include "model/gpt.hpp"
#include "model/sharded_checkpoint.hpp"
#include "partition/placement.hpp"
#include "partition/routing.hpp"
#include "partition/stages.hpp"
#include "partition/tp_rewrite.hpp"

namespace merak::actors {

// One handle per actor of the layout, [replica][stage][TP rank].
template <typename T>
using layout_grid = std::vector<std::vector<std::vector<T>>>;

// A grid of null handles for the layout of `par`.
template <typename T>
layout_grid<T> empty_grid(const parallel_options& par) {
  return layout_grid<T>(
      size_t(par.dp),
      std::vector<std::vector<T>>(size_t(par.virtual_stages()), std::vector<T>(size_t(par.tp))));
}

// What the coordinator holds: the job's model, layout and actors.
struct coordinator_state {
  model::train_options opts;
  parallel_options par;
  std::shared_ptr<const model::token_source> corpus;
  model::graph graph;                       // the single-device model
  std::vector<int> bounds;                  // its stages
  std::vector<partition::tp_graph> shards;  // its TP rewrite, per TP rank
  std::vector<int> shard_bounds;            // the stages in the rewrite
  std::string plan_summary;
  scheduler_api scheduler;
  model::lr_schedule schedule;
  int64_t step = 0;
  double bubble = 0;
  parallel_trainer::comm_stats comm;
  memory_use memory;  // the last step's, each category's most over the stage actors
  // The gates and tunnels under the actor connections between processes
  // (process_mesh.hpp): declared first, so they close after the actor system.
  std::shared_ptr<void> mesh_links;
  std::unique_ptr<caf::actor_system_config> cfg;
  std::unique_ptr<caf::actor_system> own_sys;  // unless the caller lends one
  // The trainer's own reference to its stages' core pool: released with the
  // trainer, after shutdown() saw every actor go, so the pool is freed here
  // and not by whichever stage actor happens to end last.
  std::shared_ptr<core_pool> cores_held;
  caf::actor_system* sys = nullptr;
  std::unique_ptr<caf::scoped_actor> self;
  partition::placement place;
  int me = 0;  // this process's rank in the job
  bool lead() const { return me == 0; }
  // [dp][pp][tp]: every stage actor on process 0 (the coordinator), this
  // process's own elsewhere (the rest null).
  layout_grid<stage_api> stages;
  std::vector<reducer_api> reducers;  // this process's, one per stage actor with dp > 1
  // UCX transports of groups spread over processes: every process makes one
  // per such group (a collective), members use theirs; kept to the end.
  std::vector<std::shared_ptr<comm::transport>> group_links;
  // Activations and gradients between processes (null in one process); the
  // local stage actors it delivers to, by placement index.
  std::shared_ptr<comm::tensor_channel> channel;
  struct delivery {
    std::mutex mu;
    std::vector<stage_api> to;
  };
  std::shared_ptr<delivery> deliveries = std::make_shared<delivery>();
  coordinator_api lead_coordinator;    // on other processes: process 0's
  watchdog_api watchdog;               // this process's heartbeats (multi-process jobs)
  bool failed = false;                 // a wait failed: the job is broken
  std::vector<process_api> followers;  // on process 0: the other processes' homes
  std::map<caf::actor_addr, std::string> names;
  // Per stage: who feeds it, who reads it, tied weights, and the graph
  // inputs (tokens, targets) the coordinator sends it.
  std::vector<partition::stage_route> routes;
  int64_t eval_seq = 0;  // validation forwards sent so far (their sequence numbers)
};

class coordinator : private coordinator_state {
 public:
  // Starts the job (process 0: every actor; other processes: their own),
  // resuming from opts.load when set. `lent`: the caller's actor system,
  // else one of its own. Throws merak::error, having ended what it started.
  coordinator(model::train_options o, parallel_options p,
              std::shared_ptr<const model::token_source> c, caf::actor_system* lent = nullptr);

  ~coordinator() { shutdown(); }

  // Read access for the facade.
  const coordinator_state& state() const { return *this; }
  using coordinator_state::lead;

  // The facade's operations. A failure breaks the job (mark_failed), so the
  // other processes learn why instead of waiting for process 0.
  model::step_result train_step();
  std::string save();
  double validation_loss();

 private:
  // Ends every actor this job spawned (the actor system's destructor waits
  // for them all, so a failed start must not leave any behind).
  void shutdown();

  // Runs f; any failure breaks the job, so the other processes learn why
  // instead of waiting for process 0.
  template <typename F>
  auto guarded(F&& f) {
    try {
      return f();
    } catch (const std::exception& e) {
      mark_failed(e.what());
      throw;
    }
  }

  // The job is broken (`reason`): free actors blocked in a sum with a
  // process that will not answer, and (process 0) stop the other processes
  // naming the cause. Idempotent.
  void mark_failed(const std::string& reason);

  // Spawns this process's actors and, in a job of several processes, joins
  // the others; process 0 then wires every actor and waits for the
  // scheduler's plan.
  void spawn();

  // Core lending (core_pool.hpp): the pool, each of this process's actors'
  // index in it, and the cores it counts.
  struct lending {
    std::shared_ptr<core_pool> pool;  // null: no lending
    std::map<int, int> index_of;      // placement index -> pool index
    int cores = 0;
    std::vector<int> host_ranks;  // the job's processes on this host (this one included)
    uint64_t nonce = 0;           // the job's, for names of shared memory
    int host_processes() const { return int(host_ranks.size()); }
  };

  // A stage that starts an op borrows the cores of idle stages: those of
  // its process, and in a job of several processes those of the other
  // processes of its host, through counters in shared memory. Needs no TP
  // (shards run in step) and whole replicas on the host (a stage wakes its
  // neighbours' cores before it sends them work). Collective in a job of
  // several processes (everywhere alike).
  lending make_lending(lending host, const std::vector<int>& mine, int cores, int per_actor);
  // The job's processes on this host and the job's nonce (`host_ranks`,
  // `nonce`; no lending yet). Collective in a job of several processes.
  lending find_host();

  // The actor system of its own, unless the caller lent one.
  void start_actor_system();
  // The groups that talk through comm/, in the same order on every process
  // (the UCX ones are collectives): the replicas of each (stage, shard),
  // then the shards of each (replica, stage). Null where no group.
  struct group_grid {
    layout_grid<std::shared_ptr<comm::transport>> replicas, shards;
  };
  group_grid link_groups();
  // What stage actor `at` (on this process, layout index `index`) is told
  // at its spawn.
  stage_setup stage_setup_of(const partition::actor_coordinate& at, int index,
                             const group_grid& groups, const lending& host, int per_actor,
                             int local_actors, int local_index);
  // Spawns this process's stage actors (and their reducers when dp > 1).
  process_view spawn_local_actors(const std::vector<int>& mine, const group_grid& groups,
                                  const lending& host, int per_actor,
                                  layout_grid<reducer_api>& reducer_of);
  // A job of several processes: starts this process's watchdog and joins the
  // others (process_mesh.hpp). Process 0 adopts every process's actors into
  // `stages` and `reducer_of`; the others learn the coordinator.
  void join_other_processes(process_view mine, layout_grid<reducer_api>& reducer_of);
  // Process 0: sends every stage its wiring and the scheduler its own, then
  // waits for the scheduler's plan.
  void wire(const layout_grid<reducer_api>& reducer_of);

  // This host's identity: its name and boot id (processes in containers of
  // one machine that share a name still differ by nothing else that counts).
  static std::string host_key();

  // The process's tensor channel (a collective: a UCX transport over the
  // job's processes). It hands each tensor to its local stage actor as the
  // same message a stage of this process would send; a failure reaches
  // this process's coordinator or home as `failed`. `host_threads`: the
  // threads that compute or move tensors on this host, all processes'.
  void make_channel(const lending& host, int host_threads);

  // Shared-memory rings (comm/host_ring.hpp) with the processes of this
  // host that hold a neighbouring pipeline stage of one of this process's
  // stages, one per direction, for the channel (a collective). A ring that
  // cannot be made or opened is left out (its tensors go over UCX).
  comm::channel_rings make_rings(const lending& host);

  // The other processes holding the stage before or after one of this
  // process's stages in a pipeline.
  std::set<int> pipeline_peers() const;

  // This process's endpoints of a new group whose member k lives on process
  // ranks[k] (null for members elsewhere): an in-process group when all are
  // here, else a view of a UCX transport over the job's processes, which
  // every process makes (a collective) whether it has a member or not.
  std::vector<std::shared_ptr<comm::transport>> group_endpoints(const std::vector<int>& ranks);

  std::chrono::milliseconds timeout() const {
    return std::chrono::milliseconds(int64_t(par.timeout_s * 1000));
  }

  // Waits for one message, failing with `what` after the timeout.
  template <typename... Handlers>
  void await(const std::string& what, Handlers&&... handlers) {
    std::string failure;
    (*self)->receive(
        std::forward<Handlers>(handlers)..., [&](const job_failed& f) { failure = f.what; },
        [&](const job_finished&) { failure = "process 0 ended the job"; },
        [&](caf::down_msg& dm) {
          auto it = names.find(dm.source);
          failure = fmt::format("{} stopped: {}", it == names.end() ? "an actor" : it->second,
                                reason_text(*sys, dm.reason));
        },
        caf::after(timeout()) >>
            [&] { failure = fmt::format("no progress for {} s while {}", par.timeout_s, what); });
    if (failure.empty()) return;
    mark_failed(failure);
    if (!lead()) failure = fmt::format("process {}: {}", me, failure);
    fail("{}", failure);
  }

  // On processes other than 0: the coordinator's result of this step.
  model::step_result follow_step();

  // Process 0: one step of the whole job; elsewhere follow_step.
  model::step_result run_step();
  // run_step's parts: every stage actor told the step began and given its
  // micro-batches' inputs; then, once the gradients are in, `update` sent
  // to every actor and their applied reports awaited (AdamW slices traced).
  void start_step();
  void apply_step(const apply_update& update, std::map<std::string, trace_track>& traces);

  // Chrome-trace JSON (Perfetto): one track (tid) per actor, one slice per
  // op, times in microseconds from the step's start.
  void write_trace(const std::map<std::string, trace_track>& traces, double t0);

  // Resumes from opts.load (either checkpoint format, any saved layout):
  // every stage actor reads and takes its own part, in parallel.
  void load();

  // A sharded checkpoint: the stage actors of replica 0 write their own
  // files in parallel, then the index, then the checkpoint is published.
  std::string write_checkpoint();

  // Forwards of the validation batches on replica 0's stage actors.
  double run_validation();
};

}  // namespace merak::actors
