#include "actors/reducer_actor.hpp"

#include <fmt/format.h>

#include "actors/messages.hpp"
#include "comm/collectives.hpp"
#include "core/error.hpp"

namespace merak::actors {
namespace {

struct reducer_state {
  reducer_setup cfg;
  std::unique_ptr<comm::codec> codec;  // for the sparse bucket; null: dense
  comm::codec_stats last;              // of the last sparse bucket
};

caf::behavior reducer(caf::stateful_actor<reducer_state>* self, reducer_setup setup) {
  self->state.cfg = std::move(setup);
  if (self->state.cfg.sparse.kind != comm::codec_kind::dense)
    self->state.codec = comm::make_codec(self->state.cfg.sparse);
  return {
      [=](reduce_atom, int bucket, tensor_ref flat, int64_t rows, int64_t cols) {
        auto& st = self->state;
        auto stage = caf::actor_cast<caf::actor>(self->current_sender());
        double t0 = trace_now();
        try {
          auto data = flat.t->span_f32();
          auto& link = *st.cfg.link;
          if (rows > 0 && st.codec) {
            MERAK_CHECK(rows * cols == int64_t(data.size()), "sparse bucket of {} x {} floats",
                        rows, cols);
            comm::reduce_rows(*st.codec, link, data, rows, cols, comm::tag_t(bucket), &st.last);
            // The codec returns the mean over replicas; the ring returns the
            // sum, which is what the stages' 1/dp loss scaling expects.
            const float P = float(link.size());
            for (auto& x : data) x *= P;
          } else {
            comm::allreduce_sum(link, data, comm::tag_t(bucket));
          }
        } catch (const std::exception& e) {
          // The coordinator monitors this actor and reports the reason.
          self->quit(caf::make_error(caf::sec::runtime_error,
                                     fmt::format("{}: {}", st.cfg.where, e.what())));
          return;
        }
        // "name start end;" for the trace (the stage forwards it).
        auto slice = fmt::format("{}{} {:.6f} {:.6f};", rows > 0 && st.codec ? "sparse" : "allreduce",
                                 bucket, t0, trace_now());
        self->send(stage, reduced_atom::value, bucket, flat, st.cfg.link->bytes_sent(),
                   st.last.union_rows, slice);
      },
  };
}

}  // namespace

caf::actor spawn_reducer(caf::actor_system& sys, reducer_setup setup) {
  return sys.spawn<caf::detached>(reducer, std::move(setup));
}

}  // namespace merak::actors
