#pragma once
// Collectives written once against transport.hpp: ring all-reduce (sum of
// floats, bitwise OR of bitmaps), all-gather of fixed and variable sizes,
// broadcast and barrier; and comm_stream, a background runner that lets an
// actor overlap collectives with its compute.
//
// Group: every collective runs over all ranks of the transport; all ranks
// call it with the same tag and the same sizes (allgatherv: the same call,
// each rank with its own size). A group of size 1 returns at once.
//
// Tags: a collective called with user tag `tag` uses only the transport tags
//   collective_tag(tag, sub) = tag << 16 | sub,   sub < 2^16,
// so two collectives with different user tags never match each other's
// messages, and they may be in flight at the same time on one transport
// (from different comm_streams, or interleaved by the caller's own isend /
// irecv with tags outside that range). User tags must be below
// kmax_collective_tag (2^28): the UCX transport carries 44 bits of tag.
// Within one collective, repeated messages between the same pair reuse a tag
// and rely on the transport's in-order matching.
//
// Errors: every wait is bounded by the transport's timeout; a timeout or a
// dead peer throws merak::error that names the collective, this rank, the
// peer and the tag. After an error the group is in an undefined state for
// that tag (other ranks fail too, or time out).
//
// Threads: a call blocks the calling thread, which must own the endpoint.
//
// Sequence check (set_collective_checks, or MERAK_CHECK_COLLECTIVES=1 in the
// environment): every collective first all-gathers a description of itself
// from every rank (the endpoint's call number, the collective, its bytes
// and tag; the step of transport::set_step, named but not compared), so
// ranks that issue different collectives, sizes or tags at the same point —
// what leaves a real job hanging — all fail at once with the same
// merak::error naming the first rank that differs from rank 0 and both
// calls. It costs a ring all-gather of 72 bytes a rank per call; the user
// tag kmax_collective_tag - 1 is reserved for it. With it on, an
// endpoint's collectives must come from one thread at a time in one order
// (merak's own do).

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <span>
#include <thread>
#include <utility>
#include <vector>

#include "comm/transport.hpp"
#include "core/bf16.hpp"

namespace merak::comm {

inline constexpr tag_t kmax_collective_tag = tag_t{1} << 28;

// The sequence check (above) for every collective of this process, and
// whether it is on (initially: MERAK_CHECK_COLLECTIVES set and not "0").
void set_collective_checks(bool on);
bool collective_checks();

// The transport tag of sub-message `sub` of the collective with user tag
// `tag`. Throws merak::error if tag >= kmax_collective_tag.
tag_t collective_tag(tag_t tag, uint32_t sub);

struct ring_options {
  // Each of the P segments is cut into chunks of at most this many bytes;
  // a chunk moves to the next step as soon as it is reduced (pipelining).
  size_t chunk_bytes = size_t{1} << 20;
  // Receives posted ahead (the temporary memory is window x chunk_bytes).
  int window = 4;
  // All-reduces of at most this many bytes use recursive doubling instead
  // of the ring: log2(p2) rounds of whole-buffer exchanges (p2 the largest
  // power of two <= P) instead of 2(P-1) steps, i.e. latency instead of
  // bandwidth, as MPI and NCCL choose by size. Bytes sent per rank:
  // log2(p2)·n·b, plus n·b for ranks below P - p2 (they return the result
  // to a folded rank) — equal to the ring's at P = 2, more at P > 2. 0: the
  // ring always. The default is about where doubling stops beating the ring
  // at P = 2 over shared memory (docs/results/s2-reducer.md, "S2 design
  // choices").
  size_t doubling_max_bytes = size_t{256} << 10;
};

// data <- sum over ranks of data, as a ring: reduce-scatter then all-gather,
// 2(P-1)/P x n x 4 bytes sent per rank. Each element is summed in one fixed
// order (around the ring) on one rank and then copied, so the result is
// bitwise identical on every rank. Any length, including n < P. Buffers of
// at most o.doubling_max_bytes go by recursive doubling instead (same
// guarantee: partners add the lower rank's value first, so every rank holds
// the same bits; the summation order differs from the ring's).
void allreduce_sum(transport& t, std::span<float> data, tag_t tag,
                   const ring_options& options = {});

// The same over bf16 elements (half the bytes on the wire): each addition
// is formed in float and rounded to bf16 once, so a sum over P ranks is
// rounded P - 1 times (once at P = 2); bitwise identical on every rank.
void allreduce_sum(transport& t, std::span<bf16> data, tag_t tag, const ring_options& options = {});

// data <- bitwise OR over ranks (bitmaps of non-zero rows), same ring (or
// recursive doubling when small).
void allreduce_or(transport& t, std::span<uint64_t> data, tag_t tag,
                  const ring_options& options = {});

// Both at once, in one ring or recursive doubling (one all-reduce instead of two): bits
// <- OR over ranks, sum <- SUM over ranks. `sum` must start right after
// `bits` in memory (one buffer); either may be empty. The floats are summed
// in a fixed order as in allreduce_sum (bitwise equal on every rank), though
// not necessarily the order allreduce_sum alone would use.
void allreduce_or_sum(transport& t, std::span<uint64_t> bits, std::span<float> sum, tag_t tag,
                      const ring_options& options = {});

// Sharded collectives (the distributed optimizer's): a buffer of n elements
// is split over the P ranks into contiguous shards, rank r's being
// shard_range(n, P, r) = [begin, end), the first n % P shards one element
// longer (shards may be empty when n < P).
std::pair<size_t, size_t> shard_range(size_t n, int ranks, int rank);

// data[shard_range(n, P, rank)] <- the sum over ranks of that range, as the
// first half of the ring all-reduce ((P-1)/P x n x element bytes sent per
// rank); the rest of `data` is left holding partial sums. Each element is
// summed in the ring's fixed order: starting from rank r+1's value, then
// r+2, ..., r-1, and rank r's own last (r the shard's owner, indices mod P).
void reduce_scatter_sum(transport& t, std::span<float> data, tag_t tag,
                        const ring_options& options = {});
// The same over bf16 (each addition in float, rounded to bf16 once).
void reduce_scatter_sum(transport& t, std::span<bf16> data, tag_t tag,
                        const ring_options& options = {});

// The inverse: `data` holds n elements of `elem_bytes` bytes; on entry rank
// r's shard (shard_range(n, P, r)) is its own, on return every shard holds
// its owner's bytes, on every rank ((P-1)/P x n x elem_bytes sent per rank).
void allgather_shards(transport& t, void* data, size_t n, size_t elem_bytes, tag_t tag);

// allgather_shards of a float buffer with most elements on the wire as bf16
// (half the bytes): the element ranges in `exact` ([begin, end) pairs,
// sorted and disjoint) travel as float, every other element as its value
// rounded to bf16 (to nearest, ties to even). On return every element of
// another rank's shard holds its owner's value (exact) or that value rounded
// and widened back to float (elsewhere); this rank's own shard is left
// untouched. Bytes sent per rank: the other shards' 2 bytes an element,
// 4 in `exact`. Distributed optimizers gather bf16 working weights this way
// while each rank keeps its own slice exact.
void allgather_shards_bf16(transport& t, std::span<float> data,
                           std::span<const std::pair<size_t, size_t>> exact, tag_t tag);
// Throws merak::error naming `what` unless `exact` is sorted, disjoint and
// inside n elements (allgather_shards_bf16's ranges).
void check_exact_ranges(std::span<const std::pair<size_t, size_t>> exact, size_t n,
                        const char* what);

// all (P x bytes) <- every rank's `bytes` bytes from `mine`, rank order.
// `mine` may alias all + rank*bytes.
void allgather(transport& t, const void* mine, size_t bytes, void* all, tag_t tag);

// Variable sizes: exchanges the sizes first, then concatenates every rank's
// block in rank order into `all` (resized). Returns the block sizes.
std::vector<size_t> allgatherv(transport& t, const void* mine, size_t bytes,
                               std::vector<std::byte>& all, tag_t tag);

// buf (bytes, equal on all ranks) <- root's buf, a pipelined chain
// root -> root+1 -> ... in chunks of `chunk_bytes`.
void broadcast(transport& t, void* buf, size_t bytes, int root, tag_t tag,
               size_t chunk_bytes = size_t{1} << 20);

// Returns when every rank has entered the barrier (or throws on timeout).
void barrier(transport& t, tag_t tag);

// One background thread that owns a transport endpoint and runs enqueued
// collectives in FIFO order, so that an actor can start an all-reduce and
// keep computing. While a stream exists, only its thread may use the
// endpoint. The caller keeps the buffers a closure uses alive until its
// handle is done.
class comm_stream {
 public:
  class handle {
   public:
    handle() = default;
    // True once the closure finished (successfully or not).
    bool ready() const;
    // Waits until the closure finished, at most the bound fixed when it was
    // enqueued (the transport's timeout for it and for each closure ahead of
    // it, plus one); rethrows the closure's exception; throws merak::error on
    // timeout. An empty handle returns at once.
    void wait();

   private:
    friend class comm_stream;
    std::future<void> done_;
    std::chrono::milliseconds bound_{0};
    int rank_ = 0;
  };

  explicit comm_stream(transport& t);
  // Runs what is still queued, then joins the thread.
  ~comm_stream();
  comm_stream(const comm_stream&) = delete;
  comm_stream& operator=(const comm_stream&) = delete;

  // Queues `fn(endpoint)`; thread-safe.
  handle enqueue(std::function<void(transport&)> fn);

 private:
  void run();

  transport& t_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::packaged_task<void()>> queue_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace merak::comm
