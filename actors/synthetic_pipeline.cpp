#include "actors/synthetic_pipeline.hpp"

#include <caf/all.hpp>

#include <algorithm>
#include <chrono>
#include <thread>

#include "actors/idle_wait.hpp"
#include "actors/messages.hpp"
#include "core/error.hpp"
#include "partition/simulator.hpp"

namespace merak::actors {
namespace {

using clock = std::chrono::steady_clock;

// The stages' messages (one process only). An arrival is an activation
// (forward) or a gradient (backward) of micro-batch mb.
struct synth_wiring;
struct synth_arrival {
  bool forward = true;
  int mb = 0;
};
struct synth_done {
  int stage = 0;
  double busy_us = 0;
  std::string order;
};
MERAK_INSPECT(synth_arrival, x.forward, x.mb)
MERAK_INSPECT(synth_done, x.stage, x.busy_us, x.order)
using synth_coordinator = caf::typed_actor<caf::reacts_to<synth_done>>;
using synth_api = caf::typed_actor<caf::reacts_to<synth_wiring>, caf::reacts_to<step_start>,
                                   caf::reacts_to<synth_arrival>, caf::reacts_to<pump_next>>;
struct synth_wiring {
  std::vector<synth_api> stages;
  synth_coordinator coordinator;
};
MERAK_INSPECT(synth_wiring, x.stages, x.coordinator)

// Occupies the stage for `us`. With a core per stage it spins (exact); with
// more stages than cores it sleeps first, so that the stages run side by side
// as devices would, at the price of the sleep's overshoot (tens of us).
void work_us(double us, bool may_sleep) {
  auto until = clock::now() + std::chrono::nanoseconds(int64_t(us * 1e3));
  auto sleep_until = until - std::chrono::microseconds(100);
  if (may_sleep && clock::now() < sleep_until) std::this_thread::sleep_until(sleep_until);
  while (clock::now() < until) {
  }
}

struct synth_state {
  std::unique_ptr<partition::stage_scheduler> sched;
  std::vector<synth_api> stages;
  synth_coordinator coordinator;
  std::vector<partition::op> order;
  double busy_us = 0;
  std::chrono::microseconds spin{0};
  // More stages than cores. Asked once: hardware_concurrency() reads sysfs on
  // every call (costlier than the hand-off this benchmark measures).
  bool oversubscribed = false;
};

synth_api::behavior_type synth_stage(synth_api::stateful_pointer<synth_state> self, int s,
                                     partition::stage_policy pol,
                                     synthetic_pipeline_options options) {
  auto pump = [self, s, options](auto& pump_ref) -> void {
    auto& st = self->state;
    if (!st.sched) return;
    auto op = st.sched->next();
    if (!op) {
      if (st.sched->done()) {
        std::string order;
        for (auto& x : st.order) order += partition::op_name(x) + " ";
        self->send(st.coordinator, synth_done{s, st.busy_us, std::move(order)});
        st.sched.reset();
        return;
      }
      // Waiting for a neighbour: poll briefly rather than block (see idle_wait.hpp).
      spin_until([&] { return !self->mailbox().empty(); }, st.spin);
      return;
    }
    double cost = 0;
    switch (op->kind) {
      case partition::op_kind::F:
      case partition::op_kind::Fpc:
        cost = options.t_f_us;
        break;
      case partition::op_kind::R:
        cost = options.t_r_us;
        break;
      case partition::op_kind::B:
        cost = options.t_b_us + (st.sched->policy().recompute_in_backward ? options.t_r_us : 0);
        break;
      case partition::op_kind::W:
        cost = options.t_w_us;
        break;
    }
    work_us(cost, st.oversubscribed);
    st.busy_us += cost;
    st.order.push_back(*op);
    st.sched->completed(*op);
    bool fwd = op->kind == partition::op_kind::F || op->kind == partition::op_kind::Fpc;
    if (fwd && s + 1 < int(st.stages.size()))
      self->send(st.stages[size_t(s + 1)], synth_arrival{true, op->mb});
    if (op->kind == partition::op_kind::B && s > 0)
      self->send(st.stages[size_t(s - 1)], synth_arrival{false, op->mb});
    // Let waiting messages in before the next choice; with none, go on.
    if (!self->mailbox().empty())
      self->send(self, pump_next{});
    else
      pump_ref(pump_ref);
  };
  return {
      [=](synth_wiring& w) {
        self->state.stages = std::move(w.stages);
        self->state.coordinator = std::move(w.coordinator);
        self->state.spin = spin_budget(options.spin_us, options.pp);
        self->state.oversubscribed = options.pp > int(std::thread::hardware_concurrency());
      },
      [=](const step_start&) {
        auto& st = self->state;
        st.sched = std::make_unique<partition::stage_scheduler>(pol);
        st.order.clear();
        st.busy_us = 0;
        if (s == 0)
          for (int mb = 0; mb < pol.micro_batches; ++mb) st.sched->activation_arrived(mb);
        pump(pump);
      },
      [=](const synth_arrival& a) {
        MERAK_CHECK(self->state.sched, "stage {} got an arrival before its step", s);
        if (a.forward)
          self->state.sched->activation_arrived(a.mb);
        else
          self->state.sched->gradient_arrived(a.mb);
        pump(pump);
      },
      [=](pump_next) { pump(pump); },
  };
}

}  // namespace

synthetic_pipeline_result run_synthetic_pipeline(const synthetic_pipeline_options& options) {
  auto pols = partition::make_policies(options.schedule, options.pp, options.micro_batches,
                                       options.full_recompute);
  auto sim = partition::simulate_pipeline(
      pols,
      partition::uniform_costs(options.t_f_us, options.t_b_us, options.t_r_us, options.t_w_us),
      [](int, int, int) { return 0.0; });
  caf::actor_system_config cfg;
  cfg.set("logger.console", caf::atom("none"));
  // Stages are detached; the few event-based actors share one worker that
  // sleeps when idle (the work-stealing default polls and takes CPU time from
  // the stages on a small machine).
  cfg.set("scheduler.policy", caf::atom("sharing"));
  cfg.set("scheduler.max-threads", 1);
  caf::actor_system sys{cfg};
  caf::scoped_actor self{sys};
  std::vector<synth_api> stages;
  for (int s = 0; s < options.pp; ++s)
    stages.push_back(sys.spawn<caf::detached>(synth_stage, s, pols[s], options));
  for (auto& a : stages)
    self->send(a, synth_wiring{stages, caf::actor_cast<synth_coordinator>(self)});
  std::vector<double> makespans;
  std::vector<std::string> last_orders;
  double bubble = 0;
  for (int step = 0; step < options.steps; ++step) {
    auto t0 = clock::now();
    // Last stage first: a stage has its step before anything can reach it.
    for (auto it = stages.rbegin(); it != stages.rend(); ++it) self->send(*it, step_start{step});
    std::vector<double> busy(options.pp, 0);
    std::vector<std::string> orders(options.pp);
    for (int i = 0; i < options.pp; ++i)
      self->receive(
          [&](synth_done& d) {
            busy[size_t(d.stage)] = d.busy_us;
            orders[size_t(d.stage)] = std::move(d.order);
          },
          caf::after(std::chrono::seconds(60)) >> [&] { fail("synthetic pipeline stalled"); });
    double ms = std::chrono::duration<double, std::micro>(clock::now() - t0).count();
    makespans.push_back(ms);
    double total = 0;
    for (double b : busy) total += b;
    bubble = 1.0 - total / (options.pp * ms);
    last_orders = std::move(orders);
  }
  for (auto& a : stages) self->send_exit(a, caf::exit_reason::user_shutdown);
  std::sort(makespans.begin(), makespans.end());
  synthetic_pipeline_result r;
  r.makespan_us = makespans[makespans.size() / 2];
  r.simulated_makespan_us = sim.makespan;
  r.bubble = bubble;
  r.simulated_bubble = sim.bubble_fraction();
  size_t busiest = 0;
  for (auto& st : sim.stages) busiest = std::max(busiest, st.size());
  r.overhead_us_per_op = (r.makespan_us - r.simulated_makespan_us) / double(busiest);
  // With real (noisy) costs the emergent order may legitimately differ from
  // the uniform-cost simulation; report whether it did.
  r.orders_match = true;
  for (int s = 0; s < options.pp; ++s) {
    std::string want;
    for (auto& x : sim.order(s)) want += partition::op_name(x) + " ";
    if (want != last_orders[s]) r.orders_match = false;
  }
  return r;
}

}  // namespace merak::actors
