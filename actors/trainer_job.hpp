#pragma once
// The state of one training job of the actor runtime (parallel_trainer's
// implementation), shared by its source files: parallel_trainer.cpp (start,
// steps, shutdown), trainer_processes.cpp (what a job of several processes
// needs: core lending across a host, the tensor channel, groups over UCX)
// and trainer_checkpoints.cpp (sharded checkpoints, validation). Included
// only by those (it names CAF types).

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
#include "job/bootstrap.hpp"
#include "comm/group.hpp"
#include "comm/inproc.hpp"
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

struct parallel_trainer::impl {
  model::train_options opts;
  parallel_options par;
  model::text_corpus corpus;
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
  std::vector<std::vector<std::vector<stage_api>>> stages;
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
  coordinator_api coordinator;         // on other processes: process 0's
  watchdog_api watchdog;               // this process's heartbeats (multi-process jobs)
  bool failed = false;                 // a wait failed: the job is broken
  std::vector<process_api> followers;  // on process 0: the other processes' homes
  std::map<caf::actor_addr, std::string> names;
  // Per stage: who feeds it, who reads it, tied weights, and the graph
  // inputs (tokens, targets) the coordinator sends it.
  std::vector<partition::stage_route> routes;
  int64_t eval_seq = 0;  // validation forwards sent so far (their sequence numbers)

  impl(model::train_options o, parallel_options p, model::text_corpus c,
       caf::actor_system* lent = nullptr)
      : opts(std::move(o)), par(std::move(p)), corpus(std::move(c)), sys(lent) {
    opts.validate();
    par.validate(opts.batch);
    model::check_corpus_vocab(corpus, opts.model);
    graph = model::build_model(opts.model);
    if (par.sparse.kind != comm::codec_kind::dense) {
      bool has_wte = false;
      for (auto& n : graph.nodes())
        for (auto& spec : n.params) has_wte = has_wte || spec.name == "wte";
      if (!has_wte)
        fail(
            "--sparse-reducer {} compresses the token embedding \"wte\", which this model "
            "does not have (layers::embedding makes it)",
            comm::codec_kind_name(par.sparse.kind));
    }
    const int stages = par.virtual_stages();
    if (par.stage_bounds.empty()) {
      bounds = partition::balanced_stages(graph, stages);
    } else {
      const auto& sb = par.stage_bounds;
      const int n = int(graph.nodes().size());
      bool ok = int(sb.size()) == stages + 1 && sb.front() == 0 && sb.back() == n;
      for (size_t s = 1; ok && s < sb.size(); ++s) ok = sb[s - 1] < sb[s];
      if (!ok)
        fail("stage bounds [{}] do not split the model's {} nodes into {} stages{}",
             fmt::join(sb, ", "), n, stages,
             par.chunks > 1 ? fmt::format(" (--pp {} x --chunks {})", par.pp, par.chunks)
                            : fmt::format(" (--pp {})", par.pp));
      bounds = sb;
    }
    for (int t = 0; t < par.tp; ++t) shards.push_back(partition::rewrite_for_tp(graph, par.tp, t));
    for (int b : bounds) shard_bounds.push_back(shards[0].node_map[b]);
    schedule = opts.schedule();
    try {
      spawn();
      if (!opts.load.empty()) load();
    } catch (const std::exception& e) {
      mark_failed(e.what());
      shutdown();
      throw;
    }
  }

  ~impl() { shutdown(); }

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
  lending make_lending(const std::vector<int>& mine, int cores, int per_actor);

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
                                sys->render(dm.reason));
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

  model::step_result train_step();

  // Chrome-trace JSON (Perfetto): one track (tid) per actor, one slice per
  // op, times in microseconds from the step's start.
  void write_trace(const std::map<std::string, trace_track>& traces, double t0);

  // Resumes from opts.load (either checkpoint format, any saved layout):
  // every stage actor reads and takes its own part, in parallel.
  void load();

  // A sharded checkpoint: the stage actors of replica 0 write their own
  // files in parallel, then the index, then the checkpoint is published.
  std::string save();

  // Forwards of the validation batches on replica 0's stage actors.
  double validation_loss();
};

}  // namespace merak::actors
