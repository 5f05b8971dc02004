#include "partition/simulator.hpp"

#include <algorithm>
#include <limits>
#include <queue>

#include "core/error.hpp"

namespace merak::partition {
namespace {

struct event {
  double time;
  int64_t seq;  // ties: first scheduled, first handled
  enum kind_t { complete, activation, gradient } kind;
  int stage;
  op what;
  bool operator>(const event& other) const {
    return time != other.time ? time > other.time : seq > other.seq;
  }
};
using event_queue = std::priority_queue<event, std::vector<event>, std::greater<>>;

// Queues the message a finished op sends: an F's activation to the next
// virtual stage, a B's gradient to the one before.
void send_result(const op& operation, int s, int p, int chunks, double now,
                 const link_delay_fn& delay, event_queue& q, int64_t& seq) {
  const op_target t = next_for(operation, s, p, chunks);
  if (t.stage < 0) return;
  op msg = operation;
  msg.chunk = t.chunk;
  const bool fwd = operation.kind == op_kind::F || operation.kind == op_kind::Fpc;
  q.push({now + delay(s, t.stage, operation.mb), seq++, fwd ? event::activation : event::gradient,
          t.stage, msg});
}

}  // namespace

std::vector<op> pipeline_trace::order(int stage) const {
  std::vector<op> out;
  for (auto& t : stages[stage]) out.push_back(t.what);
  return out;
}

double pipeline_trace::bubble_fraction() const {
  if (makespan <= 0 || stages.empty()) return 0;
  double busy = 0;
  for (auto& s : stages)
    for (auto& t : s) busy += t.end - t.start;
  return 1.0 - busy / (double(stages.size()) * makespan);
}

op_cost_fn uniform_costs(double t_f, double t_b, double t_r, double t_w) {
  return [=](int, const op& operation, bool recompute_in_backward) {
    switch (operation.kind) {
      case op_kind::F:
      case op_kind::Fpc:
        return t_f;
      case op_kind::R:
        return t_r;
      case op_kind::B:
        return t_b + (recompute_in_backward ? t_r : 0.0);
      case op_kind::W:
        return t_w;
    }
    return 0.0;
  };
}

std::vector<stage_policy> make_policies(schedule_kind kind, int p, int m, bool full_recompute,
                                        int chunks) {
  std::vector<stage_policy> v;
  for (int s = 0; s < p; ++s) v.push_back(make_policy(kind, p, m, s, full_recompute, chunks));
  return v;
}

double core_sharing::speed(int busy_threads) const {
  if (cores <= 0 || busy_threads <= 0) return 1.0;
  double share =
      cores > threads_per_actor
          ? std::clamp(double(busy_threads - threads_per_actor) / double(cores - threads_per_actor),
                       0.0, 1.0)
          : 0.0;
  return 1.0 / (std::max(1.0, double(busy_threads) / cores) *
                (1.0 + (std::max(1.0, contention) - 1.0) * share));
}

double shared_makespan(std::vector<double> work, int threads, int cores, double contention) {
  if (work.empty()) return 0;
  if (cores <= 0) return *std::max_element(work.begin(), work.end());
  core_sharing cs{cores, threads, threads, contention};
  // Processor sharing: the shortest job ends first, all run at one speed.
  std::sort(work.begin(), work.end());
  double now = 0, done = 0;
  for (size_t i = 0; i < work.size(); ++i) {
    int busy = int(work.size() - i) * threads;
    now += (work[i] - done) / cs.speed(busy);
    done = work[i];
  }
  return now;
}

namespace {

// The simulation with shared cores: each busy stage has work left (in
// alone-on-the-machine seconds) that drains at the speed the number of busy
// threads allows; arrivals and completions are events.
pipeline_trace simulate_shared(const std::vector<stage_policy>& policies, const op_cost_fn& cost,
                               const link_delay_fn& delay, const core_sharing& sh) {
  const int p = int(policies.size());
  std::vector<stage_scheduler> sched;
  for (auto& pol : policies) sched.emplace_back(pol);
  const int chunks = policies.front().chunks;
  std::vector<bool> busy(p, false);
  std::vector<double> left(p, 0);
  std::vector<op> running(p, op{op_kind::F, 0});
  event_queue q;  // arrivals only
  int64_t seq = 0;
  pipeline_trace tr;
  tr.stages.resize(p);
  double now = 0;
  for (int mb = 0; mb < policies.front().micro_batches; ++mb) sched[0].activation_arrived(mb);
  auto dispatch = [&] {
    for (int s = 0; s < p; ++s) {
      if (busy[s]) continue;
      auto o = sched[s].next();
      if (!o) continue;
      busy[s] = true;
      running[s] = *o;
      left[s] = cost(s, *o, sched[s].policy().recompute_in_backward);
      tr.stages[s].push_back({*o, now, now});
    }
  };
  dispatch();
  for (;;) {
    int nbusy = 0;
    for (int s = 0; s < p; ++s) nbusy += busy[s] ? 1 : 0;
    if (nbusy == 0 && q.empty()) break;
    const double v = sh.speed(nbusy * sh.threads_per_stage);
    double next = std::numeric_limits<double>::infinity();
    for (int s = 0; s < p; ++s)
      if (busy[s]) next = std::min(next, now + left[s] / v);
    if (!q.empty()) next = std::min(next, q.top().time);
    for (int s = 0; s < p; ++s)
      if (busy[s]) left[s] -= (next - now) * v;
    now = next;
    // Completions of this instant (up to rounding), then arrivals.
    for (int s = 0; s < p; ++s) {
      if (!busy[s] || left[s] > 1e-12 * std::max(1.0, now)) continue;
      busy[s] = false;
      const op o = running[s];
      tr.stages[s].back().end = now;
      sched[s].completed(o);
      send_result(o, s, p, chunks, now, delay, q, seq);
      tr.makespan = std::max(tr.makespan, now);
    }
    while (!q.empty() && q.top().time <= now) {
      event e = q.top();
      q.pop();
      if (e.kind == event::activation)
        sched[e.stage].activation_arrived(e.what.mb, e.what.chunk);
      else
        sched[e.stage].gradient_arrived(e.what.mb, e.what.chunk);
    }
    dispatch();
  }
  for (int s = 0; s < p; ++s) {
    tr.max_in_flight.push_back(sched[s].max_in_flight_seen());
    if (!sched[s].done()) tr.deadlocked = true;
  }
  return tr;
}

}  // namespace

pipeline_trace simulate_pipeline(const std::vector<stage_policy>& policies, const op_cost_fn& cost,
                                 const link_delay_fn& delay, const core_sharing& sharing) {
  if (sharing.cores > 0) return simulate_shared(policies, cost, delay, sharing);
  const int p = int(policies.size());
  std::vector<stage_scheduler> sched;
  for (auto& pol : policies) sched.emplace_back(pol);
  const int chunks = policies.front().chunks;
  std::vector<bool> busy(p, false);
  event_queue q;
  int64_t seq = 0;
  pipeline_trace tr;
  tr.stages.resize(p);
  double now = 0;
  // Stage 0's inputs (the data) are all there at the start.
  for (int mb = 0; mb < policies.front().micro_batches; ++mb) sched[0].activation_arrived(mb);

  // Only a stage an event touched can have a new op to run: dispatch those,
  // in stage order (the order every stage would be asked in).
  std::vector<char> touched(p, 1);
  std::vector<int> pending;
  for (int s = 0; s < p; ++s) pending.push_back(s);
  auto touch = [&](int s) {
    if (!touched[s]) {
      touched[s] = 1;
      pending.push_back(s);
    }
  };
  auto dispatch = [&] {
    std::sort(pending.begin(), pending.end());
    for (int s : pending) {
      touched[s] = 0;
      if (busy[s]) continue;
      auto o = sched[s].next();
      if (!o) continue;
      busy[s] = true;
      double d = cost(s, *o, sched[s].policy().recompute_in_backward);
      tr.stages[s].push_back({*o, now, now + d});
      q.push({now + d, seq++, event::complete, s, *o});
    }
    pending.clear();
  };
  dispatch();
  while (!q.empty()) {
    now = q.top().time;
    // Handle every event of this instant before any stage chooses.
    while (!q.empty() && q.top().time == now) {
      event e = q.top();
      q.pop();
      touch(e.stage);
      switch (e.kind) {
        case event::complete: {
          busy[e.stage] = false;
          sched[e.stage].completed(e.what);
          send_result(e.what, e.stage, p, chunks, now, delay, q, seq);
          tr.makespan = std::max(tr.makespan, now);
          break;
        }
        case event::activation:
          sched[e.stage].activation_arrived(e.what.mb, e.what.chunk);
          break;
        case event::gradient:
          sched[e.stage].gradient_arrived(e.what.mb, e.what.chunk);
          break;
      }
    }
    dispatch();
  }
  for (int s = 0; s < p; ++s) {
    tr.max_in_flight.push_back(sched[s].max_in_flight_seen());
    if (!sched[s].done()) tr.deadlocked = true;
  }
  return tr;
}

void fix_orders(std::vector<stage_policy>& policies) {
  for (auto& p : policies) p.order.clear();
  auto tr = simulate_pipeline(policies, uniform_costs(1, 2, 1, 1),
                              [](int, int, int) { return 0.0; });
  if (tr.deadlocked) fail("the stage policies deadlock: no order to fix");
  for (size_t s = 0; s < policies.size(); ++s) policies[s].order = tr.order(int(s));
}

}  // namespace merak::partition
