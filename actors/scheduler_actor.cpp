#include "actors/actor_errors.hpp"
#include "actors/scheduler_actor.hpp"

#include <fmt/format.h>

#include "actors/messages.hpp"
#include "core/error.hpp"
#include "partition/recompute.hpp"
#include "partition/simulator.hpp"

namespace merak::actors {

namespace {

scheduler_api::behavior_type scheduler_actor(scheduler_api::pointer self, scheduler_setup su) {
  self->set_exception_handler(exception_reason);
  struct state {
    std::vector<stage_api> stages;  // row-major [dp][pp]
    coordinator_api coordinator;
    std::vector<partition::stage_memory> reports;
    int received = 0;
    bool wired = false;
  };
  auto st = std::make_shared<state>();
  const partition::layout& L = su.layout;
  // Virtual stages (pp x chunks), and the shards of each.
  const int stage_count = L.virtual_stages(), lines = L.dp * L.tp;
  const bool full = L.recompute == partition::recompute_kind::full;
  const bool stage_aware = L.recompute == partition::recompute_kind::stage_aware;
  st->reports.resize(size_t(stage_count));
  auto plan_and_send = [self, st, su, stage_count, lines, full, stage_aware] {
    const partition::layout& L = su.layout;
    std::vector<partition::stage_policy> pols;
    for (int s = 0; s < stage_count; ++s) {
      // Every chunk of a device carries the device's policy (its chunk-0
      // actor schedules them all).
      pols.push_back(
          partition::make_policy(L.schedule, L.pp, L.micro_batches, s % L.pp, full, L.chunks));
      // In flight per chunk: what the device's order leaves of this chunk's.
      partition::set_in_flight(st->reports[size_t(s)], pols.back(), L.micro_batches, s / L.pp);
    }
    partition::recompute_plan plan;
    try {
      if (stage_aware)
        plan = su.budget > 0 ? partition::plan_for_budget(st->reports, su.budget, true)
                             : partition::plan_stage_aware(st->reports, su.r0);
      else
        plan = partition::plan_stage_aware(st->reports, 0.0);  // keeps everything
      if (!stage_aware && su.budget > 0 && !full)
        for (int s = 0; s < stage_count; ++s)
          if (plan.bytes[s] > su.budget)
            throw error(
                fmt::format("stage {} needs {} bytes without recomputation, more than "
                            "--memory-budget {} (try --recompute stage-aware)",
                            s, plan.bytes[s], su.budget));
    } catch (const std::exception& e) {
      self->send(st->coordinator, job_failed{std::string("scheduler: ") + e.what()});
      return;
    }
    if (L.recompute == partition::recompute_kind::selective) {  // every stage's attention cores
      plan.selective.assign(plan.segments.size(), 1);
      for (size_t s = 0; s < plan.bytes.size(); ++s)
        plan.bytes[s] = partition::stage_bytes(st->reports[s], plan.segments[s], true);
    }
    // Parameter shards: every replica of a stage runs the same order (its
    // all-gathers pair up by order), fixed here for each device and carried
    // by the policy of each of its chunks.
    if (partition::shards_parameters(L.sharding) && L.dp > 1) {
      std::vector<partition::stage_policy> devices(pols.begin(), pols.begin() + L.pp);
      try {
        partition::fix_orders(devices);
      } catch (const std::exception& e) {
        self->send(st->coordinator, job_failed{std::string("scheduler: ") + e.what()});
        return;
      }
      for (int s = 0; s < stage_count; ++s) pols[size_t(s)].order = devices[size_t(s % L.pp)].order;
    }
    for (int r = 0; r < lines; ++r)
      for (int s = 0; s < stage_count; ++s)
        self->send(st->stages[size_t(r) * stage_count + s],
                   stage_plan{pols[size_t(s)], plan.nodes[size_t(s)],
                              s < int(plan.selective.size()) && plan.selective[size_t(s)] != 0});
    self->send(st->coordinator, plan_ready{plan.str()});
  };
  return {
      [=](scheduler_wiring& w) {
        st->stages = std::move(w.stages);
        st->coordinator = std::move(w.coordinator);
        st->wired = true;
        if (st->received == stage_count) plan_and_send();  // reports came first
      },
      [=](memory_report& r) {
        const int stage = r.memory.stage;
        if (stage < 0 || stage >= stage_count) {
          self->send(st->coordinator,
                     job_failed{fmt::format("scheduler: memory report of stage {} of {}", stage,
                                            stage_count)});
          return;
        }
        st->reports[size_t(stage)] = std::move(r.memory);
        if (++st->received == stage_count && st->wired) plan_and_send();
      },
  };
}

}  // namespace

scheduler_api spawn_scheduler(caf::actor_system& sys, scheduler_setup setup) {
  return sys.spawn(scheduler_actor, std::move(setup));
}

}  // namespace merak::actors
