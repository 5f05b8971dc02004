// reduce_rows: runs a codec's rounds over a transport with the collectives.
#include <chrono>
#include <cstring>

#include "comm/codec.hpp"
#include "comm/collectives.hpp"
#include "comm/s2.hpp"
#include "core/error.hpp"

namespace merak::comm {

namespace {

using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

// What every rank must agree on before a step; all-gathered so that a
// mismatch names the peer. Plain integers: the same layout on every rank of
// one build.
struct step_header {
  int64_t kind, n, d, floats, sketch_rows, sketch_width, feedback;
  uint64_t seed, step;
  bool operator==(const step_header&) const = default;
};

bool valid_shape(int64_t n, int64_t d, size_t floats) {
  return n > 0 && d > 0 && int64_t(floats) == n * d;
}

step_header header_of(const codec& c, int64_t n, int64_t d, size_t floats) {
  const codec_config& k = c.config();
  const bool s2 = k.kind == codec_kind::s2;
  return {int64_t(k.kind),
          n,
          d,
          int64_t(floats),
          s2 ? k.sketch_rows : 0,
          s2 && valid_shape(n, d, floats) ? s2_sketch_width(k, n, d) : 0,
          s2 ? int64_t(k.feedback) | int64_t(k.hash) << 8 : 0,  // feedback, hash << 8
          s2 ? k.seed : 0,
          c.step()};
}

std::string describe(const step_header& h) {
  return fmt::format("codec {} n={} d={} ({} floats) r={} w={} feedback={} hash={} seed={} step={}",
                     codec_kind_name(codec_kind(h.kind)), h.n, h.d, h.floats, h.sketch_rows,
                     h.sketch_width, error_feedback_name(error_feedback(h.feedback & 0xff)),
                     sketch_hash_name(sketch_hash(h.feedback >> 8)), h.seed, h.step);
}

}  // namespace

void reduce_rows(codec& c, transport& t, std::span<float> grad, int64_t n, int64_t d, tag_t tag,
                 codec_stats* stats, const ring_options& ring) {
  codec_stats st;
  const uint64_t bytes0 = t.bytes_sent();
  const int p = t.size();
  const bool valid = valid_shape(n, d, grad.size());
  auto bad_shape = [&] {
    fail("reduce_rows on rank {}: gradient holds {} floats, but n={} d={}", t.rank(), grad.size(),
         n, d);
  };
  if (p == 1) {  // the average of one gradient is itself
    if (!valid) bad_shape();
    if (stats) *stats = st;
    return;
  }

  // Every rank checks every peer's shape before sending anything shaped; a
  // rank with a bad gradient still sends its header, so that its peers fail
  // at once naming it instead of timing out.
  auto t0 = clock_type::now();
  const step_header mine = header_of(c, n, d, grad.size());
  std::vector<step_header> all(static_cast<size_t>(p));
  allgather(t, &mine, sizeof mine, all.data(), tag);
  if (!valid) bad_shape();
  for (int r = 0; r < p; ++r)
    if (!(all[size_t(r)] == mine))
      fail("reduce_rows on rank {}: peer rank {} reduces {}, this rank {}", t.rank(), r,
           describe(all[size_t(r)]), describe(mine));
  st.comm_s += seconds_since(t0);

  t0 = clock_type::now();
  codec_message msg;
  c.encode(grad, n, d, p, msg);
  st.encode_s += seconds_since(t0);
  // All collectives of the step share `tag`: every rank runs the same
  // sequence, and the transport matches messages of one (source, tag) in
  // order, so a message cannot meet another collective's receive.
  for (;;) {
    t0 = clock_type::now();
    if (!msg.bits.empty() && !msg.sum.empty() &&
        reinterpret_cast<const void*>(msg.bits.data() + msg.bits.size()) == msg.sum.data()) {
      allreduce_or_sum(t, msg.bits, msg.sum, tag, ring);  // one buffer: one ring
    } else {
      if (!msg.bits.empty()) allreduce_or(t, msg.bits, tag, ring);
      if (!msg.sum.empty()) allreduce_sum(t, msg.sum, tag, ring);
    }
    if (msg.has_gather)
      msg.gathered_sizes = allgatherv(t, msg.gather.data(), msg.gather.size(), msg.gathered, tag);
    st.comm_s += seconds_since(t0);
    t0 = clock_type::now();
    const bool more = c.advance(msg);
    st.encode_s += seconds_since(t0);
    if (!more) break;
  }
  t0 = clock_type::now();
  c.decode(msg, grad);
  st.decode_s += seconds_since(t0);
  st.bytes_sent = t.bytes_sent() - bytes0;
  st.own_rows = c.own_rows();
  st.union_rows = c.union_rows();
  if (stats) *stats = st;
}

}  // namespace merak::comm
