#pragma once
// Stage-aware recomputation (docs/training.md, "Recomputation"): which leading layers of each
// pipeline stage keep only their input and are recomputed in backward.
//
// Stage s holds up to `in_flight` micro-batches at once (p - s under 1F1B),
// so early stages need more activation memory. The plan checkpoints whole
// segments (the stretches between cut points, one transformer block each
// for GPT) from the start of the stage.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "model/graph.hpp"
#include "partition/schedule.hpp"

namespace merak::partition {

// none: keep every activation; full: every stage but the last keeps only its
// input (full recomputation); stage_aware: the spec's per-stage plan;
// selective: every attention core is recomputed in backward, the rest kept
// (model::executor::set_selective_recompute).
enum class recompute_kind { none, full, stage_aware, selective };
// "none", "full", "stage-aware", "selective"
const char* recompute_kind_name(recompute_kind k);
// The inverse of recompute_kind_name; anything else is an error naming it.
recompute_kind parse_recompute_kind(std::string_view name);

// Memory facts of one stage, as the stage reports them to the scheduler.
struct stage_memory {
  int stage = 0;
  int64_t weights_bytes = 0;              // parameters, gradients, AdamW moments
  // Parameters that nodes of other stages use too (tied weights): their
  // gradients are settled between the stages whole, never sharded.
  int64_t tied_params = 0;
  std::vector<int> segment_nodes;         // nodes per segment, in order
  std::vector<int64_t> stash_bytes;       // per segment, one micro-batch: A
  std::vector<int64_t> checkpoint_bytes;  // per segment: its input, one micro-batch: C
  // Per segment, one micro-batch: what selective recomputation leaves out
  // of A (the attention cores' stash beyond their output).
  std::vector<int64_t> core_bytes;
  int64_t input_bytes = 0;                // the stage input, one micro-batch
  // The stage's outputs (read only by later stages), one micro-batch: in
  // the last segment's A but handed on at the end of the forward, held
  // again only while it is rebuilt.
  int64_t output_bytes = 0;
  int in_flight = 1;                      // micro-batches held at once
  // Split backward (zb-h1): micro-batches past their backward that await
  // their weight gradients, each holding `weight_bytes` (the linears'
  // inputs and output gradients), beside the in_flight ones.
  int awaiting_weights = 0;
  int64_t weight_bytes = 0;
  // How recomputation rebuilds the checkpointed segments: one at a time
  // inside backward (false; model::executor::set_segments), or all at once
  // ahead of it (true: the schedule's R ops, e.g. the shifted schedule's).
  bool whole_prefix = false;
};

// Describes nodes [first, last) of g for micro-batches of `tokens` tokens.
// `cuts`: cut_points(g) when the caller has them (null: computed here).
// A segment runs from a cut point to the next (half a transformer block:
// its attention or its MLP); with `layers_per_segment` N >= 1 (Megatron-LM's
// --recompute-method uniform --recompute-num-layers N) the segments inside
// the blocks are N whole blocks each from the stage's first block, so a
// recomputed segment keeps one input per N blocks and rebuilds N blocks at
// once. Nodes outside the blocks keep their own segments.
stage_memory describe_stage(const model::graph& g, int stage, int first, int last, int64_t tokens,
                            int in_flight, const std::vector<int>* cuts = nullptr,
                            int layers_per_segment = 0);

// The micro-batches a stage under `pol` holds at once, of m a step: its
// in_flight (never more than there are; interleaved, those of the device's
// `chunk` this stage is, partition::chunk_in_flight), and under a split
// backward the warm-up's whole, the rest of the steady count awaiting their
// weight gradients; whole_prefix from the policy's recomputation ahead of
// backward.
void set_in_flight(stage_memory& mem, const stage_policy& pol, int m, int chunk = 0);

// Where the segments of `m` start, as indices into its nodes (the first 0;
// model::executor::set_segments).
std::vector<int> segment_starts(const stage_memory& m);

// Peak bytes of a stage whose first k segments are checkpointed: weights,
// what the forwards of in_flight - 1 micro-batches kept, and the most the
// last micro-batch holds: its kept activations and the stage's outputs at
// the end of its forward, or, rebuilding segment i inside backward (the
// segments after it done and freed), the stage input, the inputs of
// segments 1 to i and segment i's activations.
// With whole_prefix every micro-batch keeps its prefix's output and the
// transient is the whole prefix rebuilt ahead of backward.
// With `selective`, the segments kept (i >= k) hold A_i minus their
// attention cores' stash.
int64_t stage_bytes(const stage_memory& m, int k, bool selective = false);

// Per token: what an attention node stashes beyond its output (its
// probabilities), which selective recomputation drops; 0 for other nodes.
int64_t attention_core_bytes_per_token(const model::graph& g, const model::node_info& n);

// Segment by segment of stage memory `m` (describe_stage), its first node
// `a` of `nodes`: the attention core's stash as the kernel keeps it (fused:
// a float log-sum-exp per head and token, `lse_share` of the
// probabilities' bytes, in their place, and selective recomputation has
// nothing more to drop; unfused and selective: none). Returns the most
// parameters a node of the stage reads first (its own).
int64_t settle_segments(stage_memory& m, const std::vector<model::node_info>& nodes, int a,
                               bool fused_core, bool selective, double lse_share);

// r_s = 1 - (1 - r0)(p - 1)/(p - 1 - s) for s < p - 1, clamped to [0, 1];
// r_{p-1} = 0.
std::vector<double> stage_aware_ratios(int p, double r0);

struct recompute_plan {
  std::vector<int> segments;   // checkpointed leading segments per stage
  std::vector<char> selective;  // per stage: the kept segments' attention cores recomputed
  std::vector<int> nodes;      // the same, in nodes (executor::set_checkpoint)
  std::vector<int64_t> bytes;  // predicted peak per stage
  std::string str() const;     // "stage 0: 3/4 segments, 812 MB; ..."
};

// The formula's plan for r0.
recompute_plan plan_stage_aware(const std::vector<stage_memory>& stages, double r0);
// The least recomputation that fits `budget` bytes on every stage: per
// stage none, else (with `selective`) selective recomputation, else the
// fewest leading segments recomputed (the rest selective when allowed).
// Throws
// merak::error naming the stage and the bytes when a stage cannot fit even
// with every segment checkpointed.
recompute_plan plan_for_budget(const std::vector<stage_memory>& stages, int64_t budget,
                               bool selective = false);

}  // namespace merak::partition
