#pragma once
// A pipeline of stage actors whose ops are synthetic busy-waits of known
// cost: measures what the actor runtime adds to a schedule (message hand-off
// overhead, emergent bubble) against the event simulator's prediction.
// No CAF in this header.

#include "partition/schedule.hpp"

namespace merak::actors {

struct synthetic_pipeline_options {
  int pp = 4;
  int micro_batches = 8;
  partition::schedule_kind schedule = partition::schedule_kind::one_f_one_b;
  bool full_recompute = false;
  double t_f_us = 1000, t_b_us = 2000, t_r_us = 1000;  // op costs
  // zb-h1: B is the input gradient (t_b_us), W the weight gradient (t_w_us).
  double t_w_us = 1000;
  int steps = 5;
  int spin_us = -1;  // idle polling before blocking; -1 = automatic (idle_wait.hpp)
};

struct synthetic_pipeline_result {
  double makespan_us = 0;            // median measured step time
  double simulated_makespan_us = 0;  // the event simulator, same policies and costs
  double bubble = 0;                 // measured, stage 0..p-1
  double simulated_bubble = 0;
  double overhead_us_per_op = 0;  // (measured - simulated) / ops of the busiest stage
  bool orders_match = false;      // each stage ran the simulator's order
};

synthetic_pipeline_result run_synthetic_pipeline(const synthetic_pipeline_options& options);

}  // namespace merak::actors
