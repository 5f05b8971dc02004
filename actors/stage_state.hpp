#pragma once
// The stage actor's state and the pieces of its behaviour that live in
// their own files: actors/stage_actor.cpp runs the schedule (ops, arrivals,
// the interleaved and TP protocols, validation, shards), and
// actors/stage_gradients.cpp finishes a step's gradients (data-parallel
// buckets, tied weights, the ready report). Included only by those two.

#include <caf/all.hpp>

#include <fmt/format.h>

#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "actors/messages.hpp"
#include "actors/stage_actor.hpp"
#include "model/grad_buckets.hpp"
#include "comm/stream_tp_group.hpp"
#include "model/adamw.hpp"
#include "model/distributed_adamw.hpp"
#include "model/executor.hpp"
#include "model/parameter_fetch.hpp"
#include "partition/schedule.hpp"
#include "partition/tie_settlement.hpp"

namespace merak::actors {

class core_loan;

struct stage_state {
  stage_setup cfg;
  std::unique_ptr<comm::stream_tp_group> tp;
  std::unique_ptr<model::parameter_store> store;
  std::unique_ptr<model::executor> exec;
  std::unique_ptr<model::adamw> opt;              // null under the distributed optimizer
  std::unique_ptr<model::distributed_adamw> dist;  // the distributed optimizer (dp > 1)
  std::unique_ptr<partition::stage_scheduler> sched;
  std::vector<stage_api> stages;    // of this replica and TP rank, by stage index
  std::vector<stage_api> tp_peers;  // the shards of this stage, by TP rank
  reducer_api reducer;
  coordinator_api coordinator;
  // TP followers: the leader's ops not run yet, and what has arrived.
  std::deque<partition::op> commanded;
  std::set<int> have_inputs, have_grads;
  int backwards = 0;
  int weights = 0;  // W ops run (zb-h1)
  // Interleaved, the device's chunk 0: an op of another chunk is running;
  // chunk_ready messages that came before this step's start.
  bool awaiting_chunk = false;
  std::vector<chunk_ready> early_ready;
  // Per micro-batch: inputs and output gradients gathered so far.
  std::map<int, std::vector<model::tensor>> inputs, grads;
  std::map<int, int> inputs_seen, grads_seen;
  // Micro-batches whose inputs all arrived between steps (from a stage on
  // another process, ahead of the coordinator's step message): they count
  // once the step starts.
  std::vector<int> early_inputs;
  // Validation forwards: inputs by sequence number, run in that order.
  std::map<int, std::vector<model::tensor>> eval_inputs;
  std::map<int, int> eval_seen;
  int next_eval = 0;
  int grads_expected = 0;  // per micro-batch: sum of readers over outputs
  // End of step: tied-weight exchange and reduction.
  bool finishing = false;
  std::unique_ptr<partition::tie_settlement> ties;  // tied weights, each step
  // Data-parallel buckets (model/grad_buckets.hpp): which gradients go
  // together; this step's buckets (flat buffers reused across steps).
  std::unique_ptr<model::grad_bucketer> bucketer;
  struct bucket {
    std::vector<int> params;
    std::shared_ptr<model::tensor> flat;
    int64_t rows = 0, cols = 0;  // the sparse (embedding) bucket
  };
  std::vector<bucket> buckets;
  // The distributed optimizer: which buckets are reduce-scattered (the others,
  // holding tied weights or the sparse codec's parameter, are all-reduced
  // whole), and the all-gathers of the updated values still out.
  std::vector<char> scatter;
  int gathers = 0;
  // Under bf16 activations the updated values travel as bf16 but for the
  // parameters some layer reads as float: per bucket, those element ranges
  // (begin, end, ...); empty outer vector: float all-gathers.
  std::vector<std::vector<int64_t>> gather_exact;
  // All-gathers taken just before a node reads them (stage_setup::fetched):
  // the buckets each node reads (by node - first), each bucket's ticket and
  // buffer while its all-gather is out (null once taken; the n-th one's
  // result is in once the reducer counted n), and the all-gathers sent.
  std::vector<std::vector<int>> node_buckets;
  std::vector<std::pair<int64_t, std::shared_ptr<model::tensor>>> fetching;
  int64_t fetches_sent = 0;
  // Parameter shards: which buckets' values are whole.
  std::unique_ptr<model::parameter_fetcher> fetch;
  // Bytes of buckets gathered or being gathered now, and the most this step.
  int64_t gathered_bytes = 0, gathered_peak = 0;
  // The most gradient bytes held at once this step (memory_use::gradients_peak).
  int64_t gradients_peak = 0;
  double update_t0 = 0;
  int shipped = 0, reduced = 0;  // buckets this step
  // Buckets the bucketer made in this round (a step; under gradient shards,
  // a micro-batch's backward): the next one's index in the layout.
  int round_buckets = 0;
  bool final_backward = false;  // the backward running is the step's last micro-batch's
  uint64_t reducer_bytes = 0;    // bytes the reducer has sent, all steps
  uint64_t reducer_bytes_reported = 0;
  // Gradient shards: the buckets handed to the reducer whose results are not
  // taken yet (oldest first), and the counts over the run of buckets
  // handed over, results taken and bucket_reduced messages read.
  std::deque<std::pair<int, std::shared_ptr<model::tensor>>> in_flight;
  int64_t handed_total = 0, taken_total = 0, messages_total = 0;
  int64_t sparse_union_rows = 0;
  double sparse_rel_error = -1;  // of the last sparse bucket (-1: not measured)
  // The sparse parameter's non-zero rows are exactly the token ids of this
  // step's micro-batches (it is used here only by the embedding, unsharded):
  // they go to the codec so that it skips its scan. Marks per row.
  bool known_rows_ok = false;
  int tokens_value = -1;
  std::vector<uint8_t> token_seen;
  double busy_s = 0;
  // Between a step's start and the ready report a message is expected soon:
  // an idle stage polls its mailbox this long before it blocks.
  bool in_step = false;
  std::chrono::microseconds spin{0};
  core_loan* loan = nullptr;  // the running op's cores, while it computes
  trace_track trace;          // this step's ops
  trace_track reducer_trace;  // the reducer's slices, this step
};

using stage_self = stage_api::stateful_pointer<stage_state>;

inline actor_coord coord(const stage_state& st) {
  return {st.cfg.dp_rank, st.cfg.stage, st.cfg.tp_rank};
}

// "stage actor (dp=.., pp=.., tp=..)", for errors.
inline std::string where(const stage_state& st) {
  return fmt::format("stage actor (dp={}, pp={}, tp={})", st.cfg.dp_rank, st.cfg.stage,
                     st.cfg.tp_rank);
}

// stage_gradients.cpp. Called as the last micro-batch's backward finishes
// node `n` (data parallelism: buckets whose gradients are final leave).
void node_finished(stage_self self, int n);
// Every backward of the step is done: the last buckets leave, then (once
// every bucket is back) the tied weights are settled and the stage reports
// ready.
void finish_backward(stage_self self);
// A holder's gradient of a tied weight (at its owner), or the owner's sum
// (at a holder).
void take_tied_gradient(stage_self self, tied_gradient& g);
// Gradient shards: a micro-batch's backward other than the last is done;
// its remaining buckets leave and the next micro-batch starts a new round.
void micro_batch_backward_done(stage_self self);
// A bucket summed over the replicas.
void take_bucket_reduced(stage_self self, bucket_reduced& r);

// actors/stage_optimizer.cpp: the optimizer step and the optimizer's part
// of checkpoints, for both the plain and the distributed optimizer.
// The layout of the distributed optimizer (setup, dp > 1): the buckets the
// bucketer makes, each reduce-scattered unless it holds a tied weight or
// the sparse parameter.
void setup_distributed_optimizer(stage_state& st);
// The gradient sum of squares this stage contributes to the global norm.
double grad_sumsq_share(const stage_state& st);
// The bytes this stage holds now, by category (activations: this step's peak).
memory_use memory_held(const stage_state& st);
// Records the gradient bytes held now if they are the step's most
// (memory_use::gradients_peak): called as each bucket leaves, when the
// whole gradients, the copies out and the shards are all held.
void note_gradient_peak(stage_state& st);
// The coordinator's verdict: the optimizer step (or the gradients dropped).
void apply_step_update(stage_self self, const apply_update& u);
// --overlap-param-gather: the values of the buckets node n reads (or of
// every bucket, n < 0) taken from their all-gathers, waiting for them.
void take_gathered_values(stage_state& st, int n);
// Parameter shards (setup, with the distributed optimizer's layout): the
// value shards kept, the values released, and every node's buckets gathered
// before it runs.
void setup_parameter_shards(stage_state& st);
// An all-gather of the distributed optimizer is back.
void take_bucket_gathered(stage_self self, bucket_gathered& g);
// Writes this shard into a checkpoint: its values (replica 0) and its
// moments, or under the distributed optimizer this replica's slices of them.
void save_own_shard(stage_self self, const save_shard& m);
// Loads this shard's part of a checkpoint.
void restore_own_shard(stage_self self, const restore_shard& m);

}  // namespace merak::actors
