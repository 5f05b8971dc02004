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
using op_cost_fn = std::function<double(int s, const op& operation, bool recompute_in_backward)>;
// Delay of a message from stage `from` to stage `to` about micro-batch mb.
using link_delay_fn = std::function<double(int from, int to, int mb)>;

// Stages whose devices share `cores` cores (actor devices on one CPU).
// While b threads are busy, each op runs at speed
//   1 / (max(1, b / cores) x (1 + (contention - 1) x share)),
// share = how far b is from one actor alone (0) to every core busy (1):
// time-slicing once threads outnumber cores, memory bandwidth before.
// cores == 0: no sharing, every op takes its cost.
struct core_sharing {
  int cores = 0;
  int threads_per_actor = 1;
  int threads_per_stage = 1;  // threads one busy stage occupies (all its dp x tp copies)
  double contention = 1;
  // Speed of every busy op while `busy_threads` threads compute.
  double speed(int busy_threads) const;
};

pipeline_trace simulate_pipeline(const std::vector<stage_policy>& policies, const op_cost_fn& cost,
                                 const link_delay_fn& delay, const core_sharing& sharing = {});

// Time to run jobs of `work` seconds each (alone-on-the-machine times), all
// started together on threads of `threads` each sharing `cores` cores as
// core_sharing describes (cores == 0: the longest job).
double shared_makespan(std::vector<double> work, int threads, int cores, double contention);

// Uniform costs: F = Fpc = t_f, B = t_b (+ t_r when recomputing inside it),
// R = t_r, W = t_w (a split backward's weight gradient; B is then its input
// gradient alone), free links.
op_cost_fn uniform_costs(double t_f, double t_b, double t_r, double t_w = 0);

// Fixes each device's order (stage_policy::order): the order its policy
// gives in a run at uniform costs (F 1, B 2, R 1, W 1) over free links.
// Those orders are one valid run, so stages that follow them finish under
// any costs and delays. Throws merak::error if the policies deadlock.
void fix_orders(std::vector<stage_policy>& policies);

// `chunks`: model chunks per device of the interleaved schedule.
std::vector<stage_policy> make_policies(schedule_kind kind, int p, int m,
                                        bool full_recompute = false, int chunks = 2);

}  // namespace merak::partition
