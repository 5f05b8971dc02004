#pragma once
// The scheduler actor: one per job. Included only by actors/*.cpp.
//
//   coordinator --scheduler_wiring(every stage shard)--> scheduler
//   stage (dp rank 0, TP shard 0) --memory_report--> scheduler
//   scheduler, once wired and every stage reported:
//     --stage_plan(policy, checkpoint nodes)--> every stage of every replica
//     --plan_ready(summary)--> coordinator   (or --job_failed--> coordinator)
//
// It turns the schedule kind into each stage's policy (in-flight limits, the
// pre(s) set) and negotiates recomputation from the memory the stages report:
// the spec's stage-aware formula, or the least recomputation that fits the
// memory budget; a stage that cannot fit fails the job naming it and the bytes.

#include <caf/all.hpp>

#include "actors/messages.hpp"
#include "partition/layout.hpp"

namespace merak::actors {

struct scheduler_setup {
  // The run's layout: its schedule and recomputation kind (full: 1F1B/GPipe
  // with every backward recomputing; stage_aware: a per-stage plan
  // negotiated from the memory reports). Every shard of every replica gets
  // its stage's plan.
  partition::layout layout;
  double r0 = 0.75;    // stage-aware formula's stage-0 ratio
  int64_t budget = 0;  // bytes per stage; 0: none
};

// Spawns the scheduler actor (on the actor system's workers).
scheduler_api spawn_scheduler(caf::actor_system& sys, scheduler_setup setup);

}  // namespace merak::actors
