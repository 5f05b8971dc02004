#include "actors/actor_errors.hpp"
#include "actors/reducer_actor.hpp"

#include <cmath>
#include <vector>

#include <fmt/format.h>

#include "actors/messages.hpp"
#include "comm/collectives.hpp"
#include "comm/device_collectives.hpp"
#include "core/error.hpp"

namespace merak::actors {
namespace {

struct reducer_state {
  reducer_setup cfg;
  std::unique_ptr<comm::codec> codec;  // for the sparse bucket; null: dense
  comm::codec_stats last;              // of the last sparse bucket
  uint64_t diagnostic_bytes = 0;       // sent by the exact rings of measure_error
  std::vector<float> exact;            // measure_error: the bucket's exact average
  std::vector<uint32_t> known;
  // Buckets on a device: its collectives (device_collectives_for).
  std::unique_ptr<comm::device_collectives> device;
};

// The replica's collectives for buckets on device `on`, made at the first
// such bucket, reduced or gathered (every replica's first: they run the
// same collectives in the same order); `tag` that bucket's.
comm::device_collectives& device_collectives_for(reducer_state& st, model::device on,
                                                 comm::tag_t tag, int bucket) {
  if (!st.device) {
    st.device = comm::make_device_collectives(*st.cfg.link, on, tag, {.side_stream = true});
    MERAK_CHECK(st.device, "bucket {} on {}: no device collectives for it", bucket, on.str());
  }
  return *st.device;
}

reducer_api::behavior_type reducer(reducer_api::stateful_pointer<reducer_state> self,
                                   reducer_setup setup) {
  self->set_exception_handler(exception_reason);
  self->state.cfg = std::move(setup);
  // However it ends, a stage waiting on an all-gather of this reducer wakes.
  if (auto p = self->state.cfg.reduced)
    self->attach_functor([p, where = self->state.cfg.where] { p->fail(where + " ended"); });
  if (auto p = self->state.cfg.fetched)
    self->attach_functor([p, where = self->state.cfg.where] { p->fail(where + " ended"); });
  if (self->state.cfg.sparse.kind != comm::codec_kind::dense)
    self->state.codec = comm::make_codec(self->state.cfg.sparse);
  return {
      [=](reduce_bucket& b) {
        auto& st = self->state;
        const int bucket = b.bucket;
        const int64_t rows = b.rows, cols = b.cols;
        auto& flat = b.flat;
        auto& known_rows = b.known_rows;
        double t0 = trace_now();
        double rel_error = -1;
        try {
          auto& link = *st.cfg.link;
          const model::device on = flat.t->where();
          if (on.type != model::device::kind::cpu) {
            MERAK_CHECK(!(rows > 0 && st.codec), "a sparse bucket on {}", on.str());
            auto& device = device_collectives_for(st, on, comm::tag_t(bucket), bucket);
            if (b.scatter)
              device.reduce_scatter_sum(*flat.t);
            else
              device.allreduce_sum(*flat.t);
          } else if (auto data = flat.t->span_f32(); rows > 0 && st.codec) {
            MERAK_CHECK(rows * cols == int64_t(data.size()), "sparse bucket of {} x {} floats",
                        rows, cols);
            if (!known_rows.empty()) {
              st.known.assign(known_rows.begin(), known_rows.end());
              st.codec->set_known_rows(st.known);
            }
            if (st.cfg.measure_error) st.exact.assign(data.begin(), data.end());
            const auto tag = comm::tag_t(bucket);
            comm::reduce_rows(*st.codec, link, data, rows, cols, tag, &st.last);
            const float P = float(link.size());
            if (st.cfg.measure_error) {
              // The same tag after the codec: every replica runs the same
              // collectives in the same order on it.
              uint64_t before = link.bytes_sent();
              comm::allreduce_sum(link, std::span<float>(st.exact), tag);
              st.diagnostic_bytes += link.bytes_sent() - before;
              for (auto& x : st.exact) x /= P;
              rel_error = comm::relative_l2_error(data, st.exact);
            }
            // The codec returns the mean over replicas; the ring returns the
            // sum, which is what the stages' 1/dp loss scaling expects.
            for (auto& x : data) x *= P;
          } else if (b.scatter) {
            comm::reduce_scatter_sum(link, data, comm::tag_t(bucket));
          } else {
            comm::allreduce_sum(link, data, comm::tag_t(bucket));
          }
        } catch (const std::exception& e) {
          // The coordinator monitors this actor and reports the reason.
          auto why = fmt::format("{}: {}", st.cfg.where, e.what());
          if (st.cfg.reduced) st.cfg.reduced->fail(why);
          self->quit(caf::make_error(caf::sec::runtime_error, why));
          return;
        }
        if (st.cfg.reduced) {
          flat = tensor_ref{};
          st.cfg.reduced->finish_one();
        }
        trace_slice slice{fmt::format("{}{}",
                                      rows > 0 && st.codec ? "sparse"
                                      : b.scatter          ? "reduce_scatter"
                                                           : "allreduce",
                                      bucket),
                          t0, trace_now()};
        self->send(b.stage, bucket_reduced{bucket, std::move(flat),
                                           st.cfg.link->bytes_sent() - st.diagnostic_bytes,
                                           st.last.union_rows, rel_error, std::move(slice)});
      },
      [=](gather_bucket& g) {
        auto& st = self->state;
        try {
          // Tags apart from the reductions': kmax_collective_tag / 2 and up.
          const auto tag = comm::tag_t(comm::kmax_collective_tag / 2 + g.bucket);
          const model::device on = g.flat.t->where();
          // bf16: the ranges that travel as floats, as [begin, end) pairs.
          std::vector<std::pair<size_t, size_t>> exact(g.exact.size() / 2);
          for (size_t k = 0; k < exact.size(); ++k)
            exact[k] = {size_t(g.exact[2 * k]), size_t(g.exact[2 * k + 1])};
          if (on.type != model::device::kind::cpu) {
            auto& device = device_collectives_for(st, on, tag, g.bucket);
            if (g.bf16)
              comm::allgather_shards_bf16(device, *st.cfg.link, *g.flat.t, exact);
            else
              device.allgather_shards(*g.flat.t);
          } else if (auto data = g.flat.t->span_f32(); g.bf16) {
            comm::allgather_shards_bf16(*st.cfg.link, data, exact, tag);
          } else {
            comm::allgather_shards(*st.cfg.link, data.data(), data.size(), sizeof(float), tag);
          }
        } catch (const std::exception& e) {
          auto why = fmt::format("{}: {}", st.cfg.where, e.what());
          if (st.cfg.fetched) st.cfg.fetched->fail(why);
          self->quit(caf::make_error(caf::sec::runtime_error, why));
          return;
        }
        if (g.fetch) {
          MERAK_CHECK(st.cfg.fetched, "{}: an all-gather to count without its progress",
                      st.cfg.where);
          g.flat = tensor_ref{};  // the stage holds the buffer
          st.cfg.fetched->finish_one();
          return;
        }
        self->send(g.stage, bucket_gathered{g.bucket, std::move(g.flat)});
      },
  };
}

}  // namespace

reducer_api spawn_reducer(caf::actor_system& sys, reducer_setup setup) {
  return sys.spawn<caf::detached>(reducer, std::move(setup));
}

}  // namespace merak::actors
