#pragma once
// Closed-form memory of a GPT-style transformer under data-parallel
// sharding, tensor and sequence parallelism and recomputation, as the
// literature states it (docs/planning.md, "Memory"). The planner prices
// merak's own graph (partition/planner.hpp); these are the published
// formulas it is compared against (docs/results/planner-memory.md) and
// that the tests hold its categories to.
//
// Notation: s sequence, b micro-batch, h hidden, a attention heads, t
// tensor-parallel size, d data-parallel size, L layers.

#include <cstdint>

#include "model/graph.hpp"
#include "partition/layout.hpp"

namespace merak::partition {

// How the model state is stored: fp32 values and gradients, or bf16 values
// with fp32 main gradients and an fp32 master copy beside the AdamW
// moments (Megatron-LM's mixed precision).
enum class state_precision { fp32, bf16_mixed };

// Bytes per parameter of each category of the model state on one replica.
struct state_bytes {
  double parameters = 0, gradients = 0, optimizer = 0;
  double total() const { return parameters + gradients + optimizer; }
};

// Bytes per parameter held by one of d data-parallel replicas (d >= 1):
//   fp32:       values 4, gradients 4, optimizer 8 (Adam m, v)
//   bf16_mixed: values 2, gradients 4 (fp32 main gradients), optimizer 12
//               (fp32 master 4 + m 4 + v 4)
// optim divides the optimizer by d, optim_grads the gradients too,
// optim_grads_params the values too. Totals: fp32 16, 8 + 8/d, 4 + 12/d,
// 16/d; bf16_mixed 18, 6 + 12/d, 2 + 16/d, 18/d. The transient gathered
// layer of optim_grads_params is not a per-parameter cost and is left out.
state_bytes state_bytes_per_parameter(state_precision p, sharding_strategy s, int d);

// What merak's runtime holds for a stage's model state, in bytes.
struct stage_weight_bytes {
  int64_t parameters = 0, gradients = 0, gradients_peak = 0, optimizer = 0;
};

// A stage's gathered parameter values under parameter shards, replayed with
// the runtime's own rules over nodes [first, last) of g: its gradient
// buckets (model/grad_buckets.hpp: the units the distributed optimizer
// shards and gathers whole; with `late_sequence_parallel` the sequence-
// parallel region's parameters apart) and its parameter fetcher
// (model/parameter_fetch.hpp) over one forward and one backward pass. A
// bucket arriving counts its float all-gather buffer (4 bytes a value); a
// whole one counts `rounded_bytes` a value for the GEMM weights (2 in a
// bf16 run, which holds them only as their rounded copy) and 4 for the rest.
struct gathered_values {
  int64_t largest_bucket = 0;  // bytes (4 a value) of the stage's largest bucket
  int64_t most_held = 0;       // the most bytes whole or arriving at once
  int buckets = 0;             // the stage's buckets
};
gathered_values replay_gathered_values(const model::graph& g, int first, int last,
                                       int64_t bucket_bytes, bool late_sequence_parallel,
                                       double rounded_bytes);

// The bytes of a stage's P parameters by category, the data-parallel
// replicas (d) sharding them as `sh` says: fp32 values (4P), gradients (4P,
// and with d > 1 the reducer's bucket buffers, 4P more), AdamW moments (8P);
// optim divides the moments by d, optim_grads the gradients too (no bucket
// copy), optim_grads_params the values too, plus the values gathered whole
// at once (`gathered.most_held`; zero, the stage's nodes unknown, gives the
// least any stage of P parameters holds).
// Gradient shards peak during backward as a bucket leaves: the shards, the
// leaving bucket's whole gradients and its copy, the copies still with the
// reducer (at most two, fewer when a step ships fewer buckets before:
// `micro_batches` backwards of `gathered.buckets` each), every bucket counted
// at the stage's largest (`gathered.largest_bucket`; unknown, `bucket_bytes`
// or the largest node's `max_node` values, at most the stage), and the next
// bucket's gradients so far (below `bucket_bytes`). `tied` of the P
// parameters (tied to another stage's) keep whole gradients.
stage_weight_bytes stage_weights(int64_t P, int64_t max_node, int d, sharding_strategy sh,
                                 int64_t bucket_bytes, const gathered_values& gathered,
                                 int64_t tied = 0, int micro_batches = 1);

// Recomputation as the activation formulas distinguish it.
enum class activation_recompute { none, selective, full };

// One transformer layer's activation bytes for one micro-batch, 16-bit
// activations ("Reducing Activation Recomputation in Large Transformer
// Models", Korthikanti et al., 2022, Table 2):
//   t = 1, none:               sbh (34 + 5as/h)
//   tensor parallel, none:     sbh (10 + 24/t + 5as/(ht))
//   tensor + sequence, none:   sbh (34/t + 5as/(ht))
//   selective drops the 5as/(ht) term (the attention core's scores,
//   softmax, dropout mask and output)
//   full:                      2sbh (the layer's input only; / t with
//                              sequence parallelism)
// With t = 1 the tensor-parallel forms reduce to the first.
double layer_activation_bytes(int64_t s, int64_t b, int64_t h, int64_t a, int t,
                              bool sequence_parallel, activation_recompute r);

// The working set of the one layer being rebuilt under full recomputation:
// that layer's activations without recomputation.
double full_recompute_working_bytes(int64_t s, int64_t b, int64_t h, int64_t a, int t,
                                    bool sequence_parallel);

// The first pipeline stage's activations under 1F1B: L/p layers for each of
// p micro-batches in flight, i.e. L layers' worth (Korthikanti et al.'s
// observation), plus the working set under full recomputation.
double first_stage_activation_bytes(int64_t s, int64_t b, int64_t h, int64_t a, int64_t layers,
                                    int t, bool sequence_parallel, activation_recompute r);

}  // namespace merak::partition
