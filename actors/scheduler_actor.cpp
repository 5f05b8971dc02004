#include "actors/scheduler_actor.hpp"

#include <fmt/format.h>

#include "actors/messages.hpp"
#include "core/error.hpp"
#include "partition/recompute.hpp"

namespace merak::actors {

caf::behavior scheduler_actor(caf::event_based_actor* self, scheduler_setup su) {
  struct state {
    std::vector<caf::actor> stages;  // row-major [dp][pp]
    caf::actor coordinator;
    std::vector<partition::stage_memory> reports;
    int received = 0;
    bool wired = false;
  };
  auto st = std::make_shared<state>();
  st->reports.resize(su.pp);
  auto plan_and_send = [self, st, su] {
    std::vector<partition::stage_policy> pols;
    for (int s = 0; s < su.pp; ++s) {
      pols.push_back(
          partition::make_policy(su.kind, su.pp, su.micro_batches, s, su.full_recompute));
      auto& p = pols.back();
      st->reports[s].in_flight = p.limited ? std::max(p.warm, p.steady) : su.micro_batches;
    }
    partition::recompute_plan plan;
    try {
      if (su.stage_aware)
        plan = su.budget > 0 ? partition::plan_for_budget(st->reports, su.budget)
                             : partition::plan_stage_aware(st->reports, su.r0);
      else
        plan = partition::plan_stage_aware(st->reports, 0.0);  // keeps everything
      if (!su.stage_aware && su.budget > 0 && !su.full_recompute)
        for (int s = 0; s < su.pp; ++s)
          if (plan.bytes[s] > su.budget)
            throw error(
                fmt::format("stage {} needs {} bytes without recomputation, more than "
                            "--memory-budget {} (try --recompute stage-aware)",
                            s, plan.bytes[s], su.budget));
    } catch (const std::exception& e) {
      self->send(st->coordinator, failed_atom::value, std::string("scheduler: ") + e.what());
      return;
    }
    for (int r = 0; r < su.dp; ++r)
      for (int s = 0; s < su.pp; ++s) {
        auto& p = pols[s];
        std::vector<int> pre(p.pre.begin(), p.pre.end());
        self->send(st->stages[size_t(r) * su.pp + s], plan_atom::value, p.warm, p.steady, p.limited,
                   p.forward_first, p.recompute_in_backward, pre, plan.nodes[s]);
      }
    self->send(st->coordinator, planned_atom::value, plan.str());
  };
  return {
      [=](wire_atom, std::vector<caf::actor> stages, caf::actor coordinator) {
        st->stages = std::move(stages);
        st->coordinator = std::move(coordinator);
        st->wired = true;
        if (st->received == su.pp) plan_and_send();  // reports came first
      },
      [=](memory_atom, int stage, int64_t weights, std::vector<int> segment_nodes,
          std::vector<int64_t> stash, std::vector<int64_t> checkpoint, int64_t input_bytes) {
        auto& m = st->reports.at(stage);
        m.stage = stage;
        m.weights_bytes = weights;
        m.segment_nodes = std::move(segment_nodes);
        m.stash_bytes = std::move(stash);
        m.checkpoint_bytes = std::move(checkpoint);
        m.input_bytes = input_bytes;
        if (++st->received == su.pp && st->wired) plan_and_send();
      },
  };
}

}  // namespace merak::actors
