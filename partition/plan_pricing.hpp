#pragma once
// The planner's pricing of one candidate plan, shared by the evaluation of
// a given layout (planner.cpp) and the search over layouts
// (plan_search.cpp): what candidates of one TP size share, a candidate
// before and after its pipeline's simulation, and the steps between.
// Internal to partition/; the interface is partition/planner.hpp.

#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "model/graph.hpp"
#include "partition/memory_model.hpp"
#include "partition/planner.hpp"
#include "partition/recompute.hpp"
#include "partition/schedule.hpp"
#include "partition/simulator.hpp"
#include "partition/tp_rewrite.hpp"

namespace merak::partition::pricing {

// A candidate broke a named rule.
struct rule_error {
  std::string rule, detail;
};

// What candidates with the same tp, pp, micro-batch size and overlap level
// share: node times, the stage split and the stages' memory (one micro-batch
// in flight; the schedule sets the count).
struct stage_layout {
  std::string rule, detail;  // the split failed: the rule it broke
  std::vector<int> bounds;
  std::vector<stage_memory> mem;
  std::vector<std::vector<double>> seg_fwd;  // forward seconds per segment
  std::vector<int64_t> max_node_params;       // per stage: its largest node's parameters
  std::vector<stage_plan> stages;
  double act_bytes = 0;
  // Bytes of a parameter value on the distributed optimizer's all-gathers:
  // a bf16 run's working weights travel as bf16 (the GEMM weights; the few
  // norms, biases and embeddings read as float are not counted apart).
  double gather_elem = 4;
  double tp_allreduce_s = 0;
  std::string tp_algo;
};

// What the search reuses across candidates with the same tp.
struct tp_context {
  int tp = 1;
  tp_graph tg;
  // By (stages: pp, or pp x chunks; rows, overlap, selective, recompute_layers).
  std::map<std::tuple<int, int64_t, int, bool, int>, stage_layout> layouts;
  const std::vector<int>* cuts = nullptr;                   // cut_points of the single-device graph
  std::vector<int> shard_cuts;                              // cut_points of the shard's graph
  double weights_bytes = 0;  // one shard's weights, gradients and moments
  // Per node range [a, b) of the shard's graph, with or without the
  // sequence-parallel region's buckets apart: its gathered values
  // (replay_gathered_values), made once whatever else differs.
  std::map<std::tuple<int, int, bool>, gathered_values> gathered;
};

// A candidate that fits every rule, before (or after) its simulation.
struct candidate {
  plan out;
  std::vector<stage_policy> policies;
  std::vector<double> prefix;  // per stage: forward seconds of its checkpointed segments
  core_sharing sharing;
  std::vector<double> act_delay;  // one activation or gradient across boundary s | s+1
  double lower_bound = 0;         // no simulation can give a shorter step
  int order = 0;                  // enumeration order (ties keep it)
};

// The context of TP size `tp` over the single-device graph g (its cut
// points `cuts`, which must outlive it); throws rule_error when tp does not
// divide the heads and features.
tp_context make_context(const model::graph& g, int tp, const std::vector<int>& cuts,
                        bool sequence_parallel);

// Checks the rules and prices everything but the pipeline (throws
// rule_error).
candidate prepare(const plan_request& r, const cost_model& costs, const model::graph& g,
                  tp_context& ctx, int dp, int pp, int m, schedule_kind kind, recompute_kind rc,
                  int overlap);

// The pipeline by simulation, and the step's totals.
// `same_pipeline`: a simulated plan whose ops and schedule are this one's
// (another sharding strategy that leaves op times alone): its pipeline is
// taken instead of simulating again.
void finish(const plan_request& r, const cost_model& costs, const model::graph& g, candidate& c,
            const plan* same_pipeline = nullptr);

// Plans that differ only in no_shard / optim run the same ops in the same
// schedule: the key of that pipeline (empty for the other strategies, whose
// collectives change op times).
std::string pipeline_key(const plan& p);

}  // namespace merak::partition::pricing
