#pragma once
// Pipeline schedules as priority policies (docs/training.md, "Schedules").
//
// A schedule is not a list of ops: each stage holds a ready queue and, when
// idle, runs the first eligible op in its current preference order, within an
// in-flight limit. GPipe, 1F1B and Merak's shifted critical-path schedule are
// three policies over the same mechanism. The runtime's stage actors and the
// event simulator both drive a stage_scheduler, so what the simulator predicts
// is what the actors do. Pure code: no actors, no threads.
//
// ZB-H1 (Qi et al., "Zero Bubble Pipeline Parallelism", 2023) splits each
// backward into B, the input gradient (what the stage before waits for),
// and W, the weight gradient (nobody waits for it): W ops fill the waits,
// and a micro-batch counts as in flight until its W, so activation memory
// stays 1F1B's.
//
// Interleaved 1F1B (Narayanan et al., SC'21) gives each of the p devices v
// model chunks: virtual stage c·p + d is chunk c of device d, so a
// micro-batch passes every device v times and the bubble shrinks to
// (p − 1)/(v·m) of the ideal time. A device runs its chunks' forwards in
// Megatron-LM's order (p micro-batches of chunk 0, then of chunk 1, ...) and
// its backwards with the chunks reversed, (p − d − 1)·2 + (v − 1)·p
// forwards ahead before the first backward; m must be a multiple of p. On
// the stage actors each virtual stage is an actor and the chunk-0 actor of
// a device runs this scheduler for all of the device's chunks
// (actors/stage_actor.hpp).

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace merak::partition {

enum class schedule_kind { gpipe, one_f_one_b, shifted, zb_h1, interleaved };
// "gpipe", "1f1b", "shifted", "zb-h1", "interleaved"
std::string_view schedule_name(schedule_kind k);
// Throws merak::error naming the value for an unknown name.
schedule_kind parse_schedule(std::string_view name);

// W: the weight-gradient half of a split backward (zb-h1 only).
enum class op_kind : uint8_t { F, Fpc, R, B, W };
struct op {
  op_kind kind;
  int mb;
  int chunk = 0;  // interleaved: which of the device's model chunks
  bool operator==(const op&) const = default;
};
// "F3", "Fpc5", "R5", "B0", "W0"; a chunk above 0 follows a dot: "F3.1".
std::string op_name(const op& operation);

// Per-stage parameters the scheduler actor hands out.
struct stage_policy {
  int stage = 0, stages = 1, micro_batches = 1;
  bool limited = true;         // false for GPipe
  int warm = 1;                // in-flight limit until the first backward
  int steady = 1;              // in-flight limit after it
  bool forward_first = false;  // GPipe: F before B always
  std::set<int> pre;           // micro-batches run as Fpc + R (checkpointed, recomputed early)
  bool recompute_in_backward = false;  // every F is Fpc and B recomputes (full recomputation)
  bool split_weight = false;           // ZB-H1: B is the input gradient; W(mb) the weight gradient
  int chunks = 1;                      // interleaved: model chunks per device (virtual stages)
  // Non-empty: the stage runs exactly these ops in this order, waiting for
  // each one's inputs even when another op could run (fixed_orders makes
  // them). The data-parallel replicas of a stage then run one order, which
  // their paired collectives need (parameter shards).
  std::vector<op> order;
};

// The policy of stage `s` of `p` for `m` micro-batches. With
// full_recompute, every stage but the last keeps only stage inputs and
// recomputes inside backward (1F1B/GPipe with full recomputation).
// Throws merak::error for p < 1, m < 1, s outside [0, p), or the shifted
// schedule with p < 3 or m < max(4, p)... (shifted falls back to 1F1B limits
// for p < 3). zb-h1 has 1F1B's limits, counted until W, and no
// recomputation (full_recompute throws). interleaved takes `chunks` >= 2
// and m a multiple of p; the others ignore `chunks`.
stage_policy make_policy(schedule_kind kind, int p, int m, int s, bool full_recompute = false,
                         int chunks = 2);


// Where an op's result goes in a pipeline of p devices with v chunks each
// (v = 1: plain stages): the stage and chunk an F's activation or a B's
// gradient is for, or stage -1 when it leaves the pipeline.
struct op_target {
  int stage, chunk;
};
op_target next_for(const op& operation, int stage, int p, int v);

// The k-th forward and backward (k from 0 to m x chunks - 1) a device runs
// under `pol`: micro-batch k, or interleaved Megatron-LM's order above.
op forward_at(const stage_policy& pol, int k);
op backward_at(const stage_policy& pol, int k);

// Interleaved: the most micro-batches of `chunk` the device under `pol`
// can hold at once, its backwards as far behind its forwards as the
// policy's in-flight limit lets them fall (as after every forward of the
// steady state). An upper bound, which runs reach with 2 chunks.
int chunk_in_flight(const stage_policy& pol, int chunk);

// One stage's decisions. Feed it arrivals and completions; ask next() when
// the stage is idle. Single-threaded (owned by one stage actor).
class stage_scheduler {
 public:
  explicit stage_scheduler(stage_policy policy);

  // Every input of F(mb) of `chunk` is here (stage 0's chunk 0 too: its data).
  void activation_arrived(int mb, int chunk = 0);
  // The output gradient of B(mb) of `chunk` is here (the last virtual stage:
  // implicit).
  void gradient_arrived(int mb, int chunk = 0);

  // The op to run now, or nothing if none is eligible. The op counts as
  // started: call completed() when it finishes. One op at a time.
  std::optional<op> next();
  void completed(const op& operation);
  // Whether next() would return an op now.
  bool has_eligible() const;

  bool done() const;
  // Micro-batches (of any chunk) forwarded and not yet done (backward, or W
  // when split).
  int in_flight() const { return forwarded_ - (policy_.split_weight ? weighted_ : backwarded_); }
  int max_in_flight_seen() const { return max_in_flight_; }
  const stage_policy& policy() const { return policy_; }
  // Whether the stash of `mb` must be kept after its forward (F) or only
  // its input (Fpc, or full recomputation).
  bool keeps_stash(int mb) const;

 private:
  bool f_eligible() const;
  bool b_eligible() const;
  bool r_eligible() const;
  // What next() returns, without starting it.
  std::optional<op> choose() const;
  bool w_eligible() const;
  // The k-th forward and backward (and W) of this stage, in policy order.
  op forward_at(int k) const { return partition::forward_at(policy_, k); }
  op backward_at(int k) const { return partition::backward_at(policy_, k); }
  int slot(const op& operation) const {
    return operation.chunk * policy_.micro_batches + operation.mb;
  }

  stage_policy policy_;
  std::vector<bool> act_, grad_, recomputed_, forwarded_slot_;  // by slot()
  int forwarded_ = 0;   // forwards run (positions in forward_at order)
  int backwarded_ = 0;  // backwards run (positions in backward_at order)
  int weighted_ = 0;    // W ops run (backward_at order; split_weight only)
  size_t ran_ = 0;      // ops run (a fixed order's position)
  bool any_backward_ = false;
  bool last_was_backward_ = false;
  bool busy_ = false;
  int max_in_flight_ = 0;
};

// The order the rules of the spec give for stage s, built directly (the
// test oracle for the emergent order; not used by the runtime). Not for
// zb-h1 or interleaved (throws).
std::vector<op> reference_order(schedule_kind kind, int p, int m, int s);

}  // namespace merak::partition
