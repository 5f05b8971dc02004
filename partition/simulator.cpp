#include "partition/simulator.hpp"

#include <algorithm>
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
  bool operator>(const event& o) const { return time != o.time ? time > o.time : seq > o.seq; }
};

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

op_cost_fn uniform_costs(double t_f, double t_b, double t_r) {
  return [=](int, const op& o, bool recompute_in_backward) {
    switch (o.kind) {
      case op_kind::F:
      case op_kind::Fpc:
        return t_f;
      case op_kind::R:
        return t_r;
      case op_kind::B:
        return t_b + (recompute_in_backward ? t_r : 0.0);
    }
    return 0.0;
  };
}

std::vector<stage_policy> make_policies(schedule_kind kind, int p, int m, bool full_recompute) {
  std::vector<stage_policy> v;
  for (int s = 0; s < p; ++s) v.push_back(make_policy(kind, p, m, s, full_recompute));
  return v;
}

pipeline_trace simulate_pipeline(const std::vector<stage_policy>& policies, const op_cost_fn& cost,
                                 const link_delay_fn& delay) {
  const int p = int(policies.size());
  std::vector<stage_scheduler> sched;
  for (auto& pol : policies) sched.emplace_back(pol);
  std::vector<bool> busy(p, false);
  std::priority_queue<event, std::vector<event>, std::greater<>> q;
  int64_t seq = 0;
  pipeline_trace tr;
  tr.stages.resize(p);
  double now = 0;
  // Stage 0's inputs (the data) are all there at the start.
  for (int mb = 0; mb < policies.front().micro_batches; ++mb) sched[0].activation_arrived(mb);

  auto dispatch = [&] {
    for (int s = 0; s < p; ++s) {
      if (busy[s]) continue;
      auto o = sched[s].next();
      if (!o) continue;
      busy[s] = true;
      double d = cost(s, *o, sched[s].policy().recompute_in_backward);
      tr.stages[s].push_back({*o, now, now + d});
      q.push({now + d, seq++, event::complete, s, *o});
    }
  };
  dispatch();
  while (!q.empty()) {
    now = q.top().time;
    // Handle every event of this instant before any stage chooses.
    while (!q.empty() && q.top().time == now) {
      event e = q.top();
      q.pop();
      switch (e.kind) {
        case event::complete: {
          busy[e.stage] = false;
          sched[e.stage].completed(e.what);
          bool fwd = e.what.kind == op_kind::F || e.what.kind == op_kind::Fpc;
          if (fwd && e.stage + 1 < p)
            q.push({now + delay(e.stage, e.stage + 1, e.what.mb), seq++, event::activation,
                    e.stage + 1, e.what});
          if (e.what.kind == op_kind::B && e.stage > 0)
            q.push({now + delay(e.stage, e.stage - 1, e.what.mb), seq++, event::gradient,
                    e.stage - 1, e.what});
          tr.makespan = std::max(tr.makespan, now);
          break;
        }
        case event::activation:
          sched[e.stage].activation_arrived(e.what.mb);
          break;
        case event::gradient:
          sched[e.stage].gradient_arrived(e.what.mb);
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

}  // namespace merak::partition
