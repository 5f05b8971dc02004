#pragma once
// The gradient reducer actor: one per stage shard (dp, pp, tp); the reducers
// of one (pp, tp) group across the dp replicas form a ring over comm/.
// Included only by actors/*.cpp.
//
//   stage --reduce_bucket(bucket, flat, rows, cols, known rows)--> its reducer
//   reducers of the group: ring all-reduce of the bucket (or, for the sparse
//     bucket, the configured codec: coo, union or S2), tag = bucket id
//   reducer --bucket_reduced(bucket, flat, bytes sent, union rows, rel error,
//     trace slice)--> the stage the bucket names
//
// Known rows (sparse bucket only; empty: the codec scans): rows that hold
// every non-zero of the bucket, increasing (the token ids of the replica's
// micro-batches), handed to codec::set_known_rows.
// With `measure_error`, the reducer also averages a copy of the sparse bucket
// exactly (a dense ring on the same tag, after the codec) and reports the
// relative L2 error ||result - exact mean|| / ||exact mean|| of the codec's
// result (-1 when not measured; 0 when the exact mean is zero). The
// diagnostic's own traffic is not counted in the reported bytes.
//
// The distributed optimizer (stage_setup::sharded) sends most buckets with
// `scatter` (a reduce-scatter: only the replica's shard comes back summed)
// and, after its AdamW step on that shard, the updated values in
// gather_bucket (an all-gather, answered with bucket_gathered); checkpoints
// gather the moments the same way.
//
// A stage hands over a bucket as soon as the backward of its last
// micro-batch has finished every gradient in it, and goes on computing:
// the reduction overlaps the rest of backward. Buckets are sent in the same
// order on every replica, so the ring matches them by tag and arrival order.
// The reducer blocks its own thread in the collective (it is detached), never
// a CAF worker. `flat` comes back holding the sum over the replicas (the
// stages scale their losses by 1/dp, so the sum is the mean gradient).

#include <caf/all.hpp>

#include <memory>

#include "actors/messages.hpp"
#include "actors/param_gather.hpp"
#include "comm/codec.hpp"
#include "comm/transport.hpp"

namespace merak::actors {

struct reducer_setup {
  std::shared_ptr<comm::transport> link;  // this replica's endpoint of the group
  // Codec for buckets sent with rows > 0 (the token embedding's gradient);
  // dense: the ring, like every other bucket.
  comm::codec_config sparse;
  bool measure_error = false;  // exact dense average of the sparse bucket too
  std::string where;           // "reducer actor (dp=.., pp=.., tp=..)", for errors
  // Gradient shards: each reduction counted there, the bucket's buffer let
  // go before (the stage holds its own; bucket_reduced then carries none).
  std::shared_ptr<count_progress> reduced;
  // --overlap-param-gather and parameter shards: each all-gather sent with
  // `fetch` counted there (shared with the stage actor).
  std::shared_ptr<count_progress> fetched;
};

reducer_api spawn_reducer(caf::actor_system& sys, reducer_setup setup);

}  // namespace merak::actors
