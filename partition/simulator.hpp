#pragma once
// Discrete-event simulation of one pipeline step.
//
// Runs one stage_scheduler per stage (the same policy objects the stage
// actors run) with op costs and point-to-point delays from callbacks, and
// records what each stage ran and when. Sends are asynchronous, as between
// actors: a stage never waits for its send to be received.

#include <functional>
#include <vector>

#include "partition/schedule.hpp"

namespace merak::partition {

struct timed_op {
  op what;
  double start, end;
};

struct pipeline_trace {
  std::vector<std::vector<timed_op>> stages;  // per stage, in execution order
  std::vector<int> max_in_flight;             // per stage
  double makespan = 0;
  bool deadlocked = false;

  std::vector<op> order(int stage) const;
  // Share of stage-time spent idle within the makespan: 1 - busy / (p x makespan).
  double bubble_fraction() const;
};

// Cost of running `o` on stage `s` (full-recomputation backwards include the
// recomputation: the callback sees op_kind::B and `recompute_in_backward`).
using op_cost_fn = std::function<double(int s, const op& o, bool recompute_in_backward)>;
// Delay of a message from stage `from` to stage `to` about micro-batch mb.
using link_delay_fn = std::function<double(int from, int to, int mb)>;

pipeline_trace simulate_pipeline(const std::vector<stage_policy>& policies, const op_cost_fn& cost,
                                 const link_delay_fn& delay);

// Uniform costs: F = Fpc = t_f, B = t_b (+ t_r when recomputing inside it),
// R = t_r, free links.
op_cost_fn uniform_costs(double t_f, double t_b, double t_r);

std::vector<stage_policy> make_policies(schedule_kind kind, int p, int m,
                                        bool full_recompute = false);

}  // namespace merak::partition
