#include "comm/collectives.hpp"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <memory>
#include <utility>

#include "core/error.hpp"
#include "core/shards.hpp"

namespace merak::comm {
namespace {

// [begin, end) of part k when `n` items are split into `parts` near-equal
// parts, the first n % parts one longer.
std::pair<size_t, size_t> split(size_t n, size_t parts, size_t k) {
  auto [b, e] = even_shard(int64_t(n), int64_t(parts), int64_t(k));
  return {size_t(b), size_t(e)};
}

int mod(int a, int p) {
  return ((a % p) + p) % p;
}

// Per-thread scratch memory of at least `n` elements of T (grows, never
// shrinks; freed at thread exit). Valid until the next call on this thread.
template <typename T>
T* scratch(size_t n) {
  static thread_local std::unique_ptr<std::byte[]> buf;
  static thread_local size_t cap = 0;
  const size_t bytes = n * sizeof(T);
  if (bytes > cap) {
    buf.reset(new std::byte[bytes]);
    cap = bytes;
  }
  return reinterpret_cast<T*>(buf.get());
}

std::atomic<bool>& checks_on() {
  static std::atomic<bool> on{[] {
    const char* v = std::getenv("MERAK_CHECK_COLLECTIVES");
    return v && *v && std::string_view(v) != "0";
  }()};
  return on;
}

// What a collective call tells every rank under the sequence check.
// The step is the issuing side's label (transport::set_step), named in
// the message but not compared: ranks may reach a step at different times.
struct call_description {
  uint64_t call = 0, bytes = 0, tag = 0;
  int64_t step = -1;
  char what[40] = {};
  std::string str() const {
    return fmt::format("call {}{}, {} of {} bytes (tag {})", call,
                       step >= 0 ? fmt::format(" in step {}", step) : std::string(),
                       std::string(what, strnlen(what, sizeof what)), bytes, tag);
  }
  bool same(const call_description& o) const {
    return call == o.call && bytes == o.bytes && tag == o.tag &&
           std::strncmp(what, o.what, sizeof what) == 0;
  }
};

// The sequence check of one call (defined below ring_allgather).
void check_sequence(const char* what, transport& t, tag_t tag, uint64_t bytes, uint64_t call);

// Runs `body` inside the transport's collective bracket
// (transport::begin_collective), prefixing a transport error with the
// collective's context; `bytes` is what the sequence check compares (0:
// sizes that differ by rank).
template <typename F>
void with_context(const char* what, transport& t, tag_t tag, uint64_t bytes, F&& body) {
  struct bracket {
    transport& t;
    explicit bracket(transport& x) : t(x) { t.begin_collective(); }
    ~bracket() { t.end_collective(); }
  } in_collective(t);
  const uint64_t call = t.next_collective_call();
  try {
    if (checks_on().load(std::memory_order_relaxed)) check_sequence(what, t, tag, bytes, call);
    body();
  } catch (const error& e) {
    throw error(
        fmt::format("{} (tag {}, rank {} of {}): {}", what, tag, t.rank(), t.size(), e.what()));
  }
}

// The ring all-reduce (reduce-scatter, then all-gather) over P segments, each
// cut into nc chunks. Work item (s, j): step s in [0, 2(P-1)), chunk j.
// At reduce-scatter step s rank r sends segment r-s and receives r-s-1 (into
// a temporary, then reduced into data); at all-gather step t = s-(P-1) it
// sends segment r+1-t and receives r-t (straight into data). The segment a
// rank sends at step s+1 is the one it received at step s, so chunk j moves
// on as soon as it arrived: steps pipeline over chunks.
// `op(dst, a, b, count, offset)` sets dst = a ⊕ b for the `count` elements
// starting at element `offset` of data (dst may be a or b); the ring reduces
// the received chunk into its own: op(own, own, received).
//
// With `scatter_only` the ring stops after the reduce-scatter half, and the
// segments are numbered one rank on so that rank r ends holding the sum of
// segment r (shard_range(n, P, r)).
template <typename T, typename Op>
void ring_allreduce(transport& t, std::span<T> data, tag_t tag, const ring_options& options,
                    Op op, bool scatter_only = false) {
  const int P = t.size(), r = t.rank();
  if (P == 1 || data.empty()) return;
  const size_t n = data.size();
  const int left = mod(r - 1, P), right = mod(r + 1, P);
  const size_t max_seg = split(n, P, 0).second;
  const size_t chunk_elems = std::max<size_t>(1, options.chunk_bytes / sizeof(T));
  const size_t nc = std::max<size_t>(1, (max_seg + chunk_elems - 1) / chunk_elems);
  const int steps = scatter_only ? P - 1 : 2 * (P - 1);
  const int shift = scatter_only ? P - 1 : 0;
  const size_t total = static_cast<size_t>(steps) * nc;
  const size_t W = std::max<size_t>(1, static_cast<size_t>(std::max(1, options.window)));
  const tag_t wire_tag = collective_tag(tag, 0);

  auto recv_seg = [&](int s) { return s < P - 1 ? mod(r - s - 1, P) : mod(r - (s - (P - 1)), P); };
  auto send_seg = [&](int s) { return s < P - 1 ? mod(r - s, P) : mod(r + 1 - (s - (P - 1)), P); };
  // Element range of chunk j of segment k.
  auto chunk = [&](int k, size_t j) {
    auto [sb, se] = split(n, P, mod(k + shift, P));
    auto [cb, ce] = split(se - sb, nc, j);
    return std::pair<size_t, size_t>{sb + cb, sb + ce};
  };

  // Receive slots for the reduce-scatter chunks: W in flight at most, and no
  // more than there are reduce-scatter items. Scratch memory of this thread,
  // kept between calls: allocating and faulting in fresh pages for every
  // all-reduce can cost more than the transfer under memory pressure
  // (docs/results/distributed-runtime.md, "Transport choices").
  const size_t slot_elems = std::min(chunk_elems, max_seg);
  const size_t slots = std::min(W, static_cast<size_t>(P - 1) * nc);
  T* temp = scratch<T>(slots * slot_elems);
  std::vector<completion> sends(total), recvs(total);
  std::vector<char> sent(total, 0), posted(total, 0);

  auto post_send = [&](size_t i) {
    const int s = static_cast<int>(i / nc);
    auto [b, e] = chunk(send_seg(s), i % nc);
    if (e > b) sends[i] = t.isend(right, wire_tag, data.data() + b, (e - b) * sizeof(T));
    sent[i] = 1;
  };
  // Posts the receive of item i; an all-gather receive overwrites the chunk
  // this rank sent at reduce-scatter step t, which must have left first.
  auto post_recv = [&](size_t i) {
    const int s = static_cast<int>(i / nc);
    const size_t j = i % nc;
    auto [b, e] = chunk(recv_seg(s), j);
    if (s < P - 1) {
      if (e > b)
        recvs[i] = t.irecv(left, wire_tag, temp + (i % slots) * slot_elems, (e - b) * sizeof(T));
    } else {
      sends[static_cast<size_t>(s - (P - 1)) * nc + j].wait();
      if (e > b) recvs[i] = t.irecv(left, wire_tag, data.data() + b, (e - b) * sizeof(T));
    }
    posted[i] = 1;
  };
  auto can_post_now = [&](size_t i) {
    const int s = static_cast<int>(i / nc);
    if (s < P - 1) return true;
    const size_t g = static_cast<size_t>(s - (P - 1)) * nc + i % nc;
    return sent[g] && sends[g].test();
  };

  for (size_t j = 0; j < nc; ++j) post_send(j);
  size_t next_post = 0;
  for (size_t cur = 0; cur < total; ++cur) {
    while (next_post < total && next_post < cur + W && can_post_now(next_post))
      post_recv(next_post++);
    if (!posted[cur]) {
      MERAK_CHECK(next_post == cur, "ring: receive {} skipped", cur);
      post_recv(next_post++);
    }
    recvs[cur].wait();
    const int s = static_cast<int>(cur / nc);
    const size_t j = cur % nc;
    if (s < P - 1) {
      auto [b, e] = chunk(recv_seg(s), j);
      op(data.data() + b, data.data() + b, temp + (cur % slots) * slot_elems, e - b, b);
    }
    if (s + 1 < steps) post_send(static_cast<size_t>(s + 1) * nc + j);
  }
  for (auto& c : sends) c.wait();
}

// Recursive doubling (buffers of at most ring_options::doubling_max_bytes):
// with p2 the largest power of two <= P, ranks p2..P-1 first hand their
// buffer to rank r - p2, which reduces it into its own (fold); then in round
// m = 1, 2, 4, ... < p2 rank r exchanges its whole buffer with r ^ m and
// both reduce it, the lower rank's value first, so that the partners hold the
// same bits; last, ranks r < P - p2 send the result back to r + p2.
// log2(p2) rounds instead of the ring's 2(P-1) steps; each sends the whole
// buffer (n·4 bytes per round, plus the fold: see collectives.hpp).
template <typename T, typename Op>
void doubling_allreduce(transport& t, std::span<T> data, tag_t tag, Op op) {
  const int P = t.size(), r = t.rank();
  if (P == 1 || data.empty()) return;
  const size_t n = data.size(), bytes = n * sizeof(T);
  int p2 = 1;
  while (p2 * 2 <= P) p2 *= 2;
  const int extra = P - p2;
  const tag_t wire_tag = collective_tag(tag, 0);
  T* own = data.data();
  if (r >= p2) {  // folded: hand the buffer over, then wait for the result
    t.isend(r - p2, wire_tag, own, bytes).wait();
    t.irecv(r - p2, wire_tag, own, bytes).wait();
    return;
  }
  T* temp = scratch<T>(n);
  if (r < extra) {
    t.irecv(r + p2, wire_tag, temp, bytes).wait();
    op(own, own, temp, n, 0);  // the lower rank's value first
  }
  for (int m = 1; m < p2; m <<= 1) {
    const int peer = r ^ m;
    completion rc = t.irecv(peer, wire_tag, temp, bytes);
    completion sc = t.isend(peer, wire_tag, own, bytes);
    rc.wait();
    sc.wait();  // own is overwritten next
    if (r < peer)
      op(own, own, temp, n, 0);
    else
      op(own, temp, own, n, 0);
  }
  if (r < extra) t.isend(r + p2, wire_tag, own, bytes).wait();
}

// The all-reduce of `data` by ring or, when small, by recursive doubling.
template <typename T, typename Op>
void allreduce_by_size(transport& t, std::span<T> data, tag_t tag, const ring_options& options,
                       Op op) {
  if (data.size() * sizeof(T) <= options.doubling_max_bytes)
    doubling_allreduce(t, data, tag, op);
  else
    ring_allreduce(t, data, tag, options, op);
}

// Ring all-gather of blocks at offsets[k], sizes[k] in `all`; this rank's
// block is already in place.
void ring_allgather(transport& t, std::byte* all, const std::vector<size_t>& offsets,
                    const std::vector<size_t>& sizes, tag_t wire_tag) {
  const int P = t.size(), r = t.rank();
  const int left = mod(r - 1, P), right = mod(r + 1, P);
  // Each block moves in chunks, all posted at once: the transport overlaps
  // their copies instead of one whole-block message's.
  constexpr size_t kchunk = size_t{1} << 20;
  std::vector<completion> pending;
  for (int s = 0; s < P - 1; ++s) {
    const int sb = mod(r - s, P), rb = mod(r - s - 1, P);
    pending.clear();
    for (size_t at = 0; at < sizes[rb]; at += kchunk)
      pending.push_back(
          t.irecv(left, wire_tag, all + offsets[rb] + at, std::min(kchunk, sizes[rb] - at)));
    for (size_t at = 0; at < sizes[sb]; at += kchunk)
      pending.push_back(
          t.isend(right, wire_tag, all + offsets[sb] + at, std::min(kchunk, sizes[sb] - at)));
    for (auto& c : pending) c.wait();
  }
}

// Every rank's description of its call, all-gathered; each rank compares
// them with rank 0's, so every rank fails alike, naming the first rank
// that differs.
void check_sequence(const char* what, transport& t, tag_t tag, uint64_t bytes, uint64_t call) {
  const int P = t.size();
  if (P == 1) return;
  std::vector<call_description> all(static_cast<size_t>(P));
  auto& mine = all[size_t(t.rank())];
  mine.call = call;
  mine.bytes = bytes;
  mine.tag = tag;
  mine.step = t.step();
  std::strncpy(mine.what, what, sizeof mine.what - 1);
  const size_t n = static_cast<size_t>(P);
  std::vector<size_t> offsets(n), sizes(n, sizeof(call_description));
  for (size_t k = 0; k < n; ++k) offsets[k] = k * sizeof(call_description);
  ring_allgather(t, reinterpret_cast<std::byte*>(all.data()), offsets, sizes,
                 collective_tag(kmax_collective_tag - 1, 0));
  for (int k = 1; k < P; ++k)
    if (!all[size_t(k)].same(all[0]))
      fail(
          "collective sequence check: rank {} issued {} where rank 0 issued {} (every rank of "
          "a group must issue the same collectives, sizes and tags in the same order)",
          k, all[size_t(k)].str(), all[0].str());
}

}  // namespace

tag_t collective_tag(tag_t tag, uint32_t sub) {
  if (tag >= kmax_collective_tag) fail("collective tag {} too large (must be below 2^28)", tag);
  if (sub >= (1u << 16)) fail("collective sub-tag {} too large (must be below 2^16)", sub);
  return tag << 16 | sub;
}

namespace {

// dst = a + b over n elements (the ring's reduction; bf16 summed in float).
void add_f32(float* dst, const float* a, const float* b, size_t n, size_t) {
  for (size_t k = 0; k < n; ++k) dst[k] = a[k] + b[k];
}
void add_bf16(bf16* dst, const bf16* a, const bf16* b, size_t n, size_t) {
  for (size_t k = 0; k < n; ++k) dst[k] = to_bf16(to_f32(a[k]) + to_f32(b[k]));
}

}  // namespace

void set_collective_checks(bool on) { checks_on().store(on, std::memory_order_relaxed); }
bool collective_checks() { return checks_on().load(std::memory_order_relaxed); }

void allreduce_sum(transport& t, std::span<float> data, tag_t tag, const ring_options& options) {
  with_context("allreduce_sum", t, tag, data.size_bytes(),
               [&] { allreduce_by_size(t, data, tag, options, add_f32); });
}

void allreduce_sum(transport& t, std::span<bf16> data, tag_t tag, const ring_options& options) {
  with_context("allreduce_sum (bf16)", t, tag, data.size_bytes(),
               [&] { allreduce_by_size(t, data, tag, options, add_bf16); });
}

std::pair<size_t, size_t> shard_range(size_t n, int ranks, int rank) {
  MERAK_CHECK(ranks > 0 && rank >= 0 && rank < ranks, "shard_range: rank {} of {}", rank, ranks);
  return split(n, size_t(ranks), size_t(rank));
}

void reduce_scatter_sum(transport& t, std::span<float> data, tag_t tag,
                        const ring_options& options) {
  with_context("reduce_scatter_sum", t, tag, data.size_bytes(),
               [&] { ring_allreduce(t, data, tag, options, add_f32, true); });
}

void reduce_scatter_sum(transport& t, std::span<bf16> data, tag_t tag,
                        const ring_options& options) {
  with_context("reduce_scatter_sum (bf16)", t, tag, data.size_bytes(),
               [&] { ring_allreduce(t, data, tag, options, add_bf16, true); });
}

void allgather_shards(transport& t, void* data, size_t n, size_t elem_bytes, tag_t tag) {
  with_context("allgather_shards", t, tag, n * elem_bytes, [&] {
    const int P = t.size();
    if (P == 1 || n == 0) return;
    std::vector<size_t> offsets(P), sizes(P);
    for (int k = 0; k < P; ++k) {
      auto [b, e] = split(n, size_t(P), size_t(k));
      offsets[k] = b * elem_bytes;
      sizes[k] = (e - b) * elem_bytes;
    }
    ring_allgather(t, static_cast<std::byte*>(data), offsets, sizes, collective_tag(tag, 0));
  });
}

namespace {

// The elements of [b, e) as runs of one kind, in order: (end, exact) pairs
// cut where an `exact` range starts or ends.
template <typename F>
void for_each_run(size_t b, size_t e, std::span<const std::pair<size_t, size_t>> exact, F&& f) {
  auto it = std::lower_bound(exact.begin(), exact.end(), b,
                             [](const std::pair<size_t, size_t>& r, size_t i) { return r.second <= i; });
  size_t i = b;
  while (i < e) {
    if (it == exact.end() || it->first >= e) {
      f(i, e, false);
      return;
    }
    if (it->first > i) {
      f(i, it->first, false);
      i = it->first;
    }
    const size_t end = std::min(e, it->second);
    f(i, end, true);
    i = end;
    ++it;
  }
}

size_t mixed_wire_bytes(size_t b, size_t e, std::span<const std::pair<size_t, size_t>> exact) {
  size_t bytes = 0;
  for_each_run(b, e, exact,
               [&](size_t x, size_t y, bool f32) { bytes += (y - x) * (f32 ? 4 : 2); });
  return bytes;
}

void encode_mixed(const float* data, size_t b, size_t e,
                  std::span<const std::pair<size_t, size_t>> exact, std::byte* out) {
  for_each_run(b, e, exact, [&](size_t x, size_t y, bool f32) {
    if (f32) {
      std::memcpy(out, data + x, (y - x) * 4);
      out += (y - x) * 4;
      return;
    }
    for (size_t i = x; i < y; ++i, out += 2) {
      const bf16 h = to_bf16(data[i]);
      std::memcpy(out, &h, 2);
    }
  });
}

void decode_mixed(const std::byte* in, size_t b, size_t e,
                  std::span<const std::pair<size_t, size_t>> exact, float* data) {
  for_each_run(b, e, exact, [&](size_t x, size_t y, bool f32) {
    if (f32) {
      std::memcpy(data + x, in, (y - x) * 4);
      in += (y - x) * 4;
      return;
    }
    for (size_t i = x; i < y; ++i, in += 2) {
      bf16 h;
      std::memcpy(&h, in, 2);
      data[i] = to_f32(h);
    }
  });
}

}  // namespace

void check_exact_ranges(std::span<const std::pair<size_t, size_t>> exact, size_t n,
                        const char* what) {
  for (size_t k = 0; k < exact.size(); ++k)
    MERAK_CHECK(exact[k].first <= exact[k].second && exact[k].second <= n &&
                    (k == 0 || exact[k - 1].second <= exact[k].first),
                "{}: exact range {} [{}, {}) is not sorted, disjoint and inside the {} elements",
                what, k, exact[k].first, exact[k].second, n);
}

void allgather_shards_bf16(transport& t, std::span<float> data,
                           std::span<const std::pair<size_t, size_t>> exact, tag_t tag) {
  const size_t n = data.size();
  check_exact_ranges(exact, n, "allgather_shards_bf16");
  const int P = t.size();
  std::vector<size_t> offsets(static_cast<size_t>(P)), sizes(static_cast<size_t>(P));
  size_t total = 0;
  for (int k = 0; k < P; ++k) {
    auto [b, e] = split(n, size_t(P), size_t(k));
    offsets[size_t(k)] = total;
    sizes[size_t(k)] = mixed_wire_bytes(b, e, exact);
    total += sizes[size_t(k)];
  }
  with_context("allgather_shards_bf16", t, tag, total, [&] {
    if (P == 1 || n == 0) return;
    // The encoded blocks in this thread's scratch, kept between calls as the
    // ring's receive slots are.
    std::byte* wire = scratch<std::byte>(total);
    const int r = t.rank();
    {
      auto [b, e] = split(n, size_t(P), size_t(r));
      encode_mixed(data.data(), b, e, exact, wire + offsets[size_t(r)]);
    }
    ring_allgather(t, wire, offsets, sizes, collective_tag(tag, 0));
    for (int k = 0; k < P; ++k) {
      if (k == r) continue;
      auto [b, e] = split(n, size_t(P), size_t(k));
      decode_mixed(wire + offsets[size_t(k)], b, e, exact, data.data());
    }
  });
}

void allreduce_or(transport& t, std::span<uint64_t> data, tag_t tag, const ring_options& options) {
  with_context("allreduce_or", t, tag, data.size_bytes(), [&] {
    allreduce_by_size(t, data, tag, options,
                      [](uint64_t* dst, const uint64_t* a, const uint64_t* b, size_t n, size_t) {
                        for (size_t k = 0; k < n; ++k) dst[k] = a[k] | b[k];
                      });
  });
}

void allreduce_or_sum(transport& t, std::span<uint64_t> bits, std::span<float> sum, tag_t tag,
                      const ring_options& options) {
  if (!sum.empty() && !bits.empty() &&
      reinterpret_cast<const void*>(bits.data() + bits.size()) != sum.data())
    fail("allreduce_or_sum: the floats must follow the bitmap in memory");
  with_context("allreduce_or_sum", t, tag, bits.size_bytes() + sum.size_bytes(), [&] {
    // One all-reduce over the 32-bit words of both: OR below `edge`, float SUM above it. The
    // caller's buffer holds uint64_t and float objects, so values are moved with memcpy.
    const size_t edge = bits.size() * 2;
    auto* words = bits.empty() ? reinterpret_cast<uint32_t*>(sum.data())
                               : reinterpret_cast<uint32_t*>(bits.data());
    std::span<uint32_t> all(words, edge + sum.size());
    allreduce_by_size(
        t, all, tag, options,
        [edge](uint32_t* dst, const uint32_t* a, const uint32_t* b, size_t n, size_t at) {
          size_t k = 0;
          for (; k < n && at + k < edge; ++k) {
            uint32_t x, y;
            std::memcpy(&x, a + k, 4), std::memcpy(&y, b + k, 4);
            x |= y;
            std::memcpy(dst + k, &x, 4);
          }
          for (; k < n; ++k) {
            float x, y;
            std::memcpy(&x, a + k, 4), std::memcpy(&y, b + k, 4);
            x += y;
            std::memcpy(dst + k, &x, 4);
          }
        });
  });
}

void allgather(transport& t, const void* mine, size_t bytes, void* all, tag_t tag) {
  with_context("allgather", t, tag, bytes, [&] {
    const int P = t.size();
    auto* out = static_cast<std::byte*>(all);
    std::byte* own = out + static_cast<size_t>(t.rank()) * bytes;
    if (own != mine && bytes) std::memmove(own, mine, bytes);
    std::vector<size_t> offsets(P), sizes(P, bytes);
    for (int k = 0; k < P; ++k) offsets[k] = static_cast<size_t>(k) * bytes;
    ring_allgather(t, out, offsets, sizes, collective_tag(tag, 0));
  });
}

std::vector<size_t> allgatherv(transport& t, const void* mine, size_t bytes,
                               std::vector<std::byte>& all, tag_t tag) {
  const int P = t.size();
  std::vector<size_t> sizes(P);
  with_context("allgatherv", t, tag, 0, [&] {
    std::vector<uint64_t> sz(P);
    const uint64_t b = bytes;
    std::vector<size_t> offsets(P), eight(P, sizeof(uint64_t));
    for (int k = 0; k < P; ++k) offsets[k] = k * sizeof(uint64_t);
    std::memcpy(sz.data() + t.rank(), &b, sizeof b);
    ring_allgather(t, reinterpret_cast<std::byte*>(sz.data()), offsets, eight,
                   collective_tag(tag, 0));
    size_t total = 0;
    for (int k = 0; k < P; ++k) {
      sizes[k] = sz[k];
      offsets[k] = total;
      total += sizes[k];
    }
    all.resize(total);
    if (bytes) std::memcpy(all.data() + offsets[t.rank()], mine, bytes);
    ring_allgather(t, all.data(), offsets, sizes, collective_tag(tag, 1));
  });
  return sizes;
}

void broadcast(transport& t, void* buf, size_t bytes, int root, tag_t tag, size_t chunk_bytes) {
  with_context("broadcast", t, tag, bytes, [&] {
    const int P = t.size();
    if (root < 0 || root >= P) fail("root {} is not a rank of a group of {}", root, P);
    if (P == 1 || bytes == 0) return;
    const int v = mod(t.rank() - root, P);  // position in the chain
    const int prev = mod(t.rank() - 1, P), next = mod(t.rank() + 1, P);
    const size_t cb = std::max<size_t>(1, chunk_bytes);
    const size_t nc = (bytes + cb - 1) / cb;
    const tag_t wire = collective_tag(tag, 2);
    auto* p = static_cast<std::byte*>(buf);
    constexpr size_t window = 4;
    std::vector<completion> recvs(nc), sends(nc);
    size_t posted = 0;
    for (size_t c = 0; c < nc; ++c) {
      const size_t b = c * cb, len = std::min(cb, bytes - b);
      if (v > 0) {
        for (; posted < nc && posted < c + window; ++posted) {
          const size_t pb = posted * cb;
          recvs[posted] = t.irecv(prev, wire, p + pb, std::min(cb, bytes - pb));
        }
        recvs[c].wait();
      }
      if (v < P - 1) sends[c] = t.isend(next, wire, p + b, len);
    }
    for (auto& s : sends) s.wait();
  });
}

void barrier(transport& t, tag_t tag) {
  uint64_t one = 1;
  std::vector<uint64_t> all(t.size());
  with_context("barrier", t, tag, 0, [&] {
    std::vector<size_t> offsets(t.size()), sizes(t.size(), sizeof one);
    for (int k = 0; k < t.size(); ++k) offsets[k] = k * sizeof one;
    all[t.rank()] = one;
    ring_allgather(t, reinterpret_cast<std::byte*>(all.data()), offsets, sizes,
                   collective_tag(tag, 3));
  });
}

// ---- comm_stream ----

bool comm_stream::handle::ready() const {
  return !done_.valid() || done_.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
}

void comm_stream::handle::wait() {
  if (!done_.valid()) return;
  if (done_.wait_for(bound_) != std::future_status::ready)
    fail("comm_stream rank {}: collective not done after {} ms", rank_, bound_.count());
  done_.get();  // rethrows the closure's error
}

comm_stream::comm_stream(transport& t) : t_(t), thread_([this] { run(); }) {}

comm_stream::~comm_stream() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

comm_stream::handle comm_stream::enqueue(std::function<void(transport&)> fn) {
  handle h;
  std::packaged_task<void()> task([this, fn = std::move(fn)] { fn(t_); });
  h.done_ = task.get_future();
  h.rank_ = t_.rank();
  {
    std::lock_guard lock(mu_);
    h.bound_ = t_.timeout() * static_cast<int>(queue_.size() + 2);
    queue_.push_back(std::move(task));
  }
  cv_.notify_one();
  return h;
}

void comm_stream::run() {
  for (;;) {
    std::packaged_task<void()> task;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stop_ and drained
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    task();  // exceptions go into the future
  }
}

}  // namespace merak::comm
