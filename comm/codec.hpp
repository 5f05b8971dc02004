#pragma once
// Gradient codecs for row-sparse gradients, and the driver that runs one over
// a transport. Algorithm, traffic and error feedback: docs/s2-reducer.md.
//
// A gradient G is (n, d) f32 row-major; a row is non-zero when any of its d
// values is (NaN counts, -0 does not). Every codec is a pure
// encode / reduce / decode sequence:
//
//   encode(G_i)      -> message_i                  (this rank, no communication)
//   reduce(message_0..message_{P-1})               (the collectives: OR of
//                                                    bits, SUM of floats,
//                                                    all-gather of blocks)
//   advance(reduced) -> next round's message, or done
//   decode(reduced)  -> G_i := estimate of (1/P)·Σ_k G_k   (in place)
//
// so that it is tested without a transport (reduce_messages, run_codecs) and
// driven over one (reduce_rows) with the same code.
//
// | kind  | rounds                                   | exact |
// |-------|------------------------------------------|-------|
// | dense | SUM(G)                                   | yes   |
// | coo   | all-gather (row index, row) pairs        | yes, summed in rank order |
// | union | OR(bitmap); SUM(union rows packed)       | yes   |
// | s2    | OR(bitmap) and SUM(count sketch r × w)   | unbiased estimate (r = 1) |
//
// Threads: a codec object belongs to one rank and is used by one thread at a
// time; it keeps state between steps (the step counter that seeds S2's
// hashes, S2's error feedback), so every rank must run the same sequence of
// steps on its own codec made from the same codec_config.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "comm/collectives.hpp"
#include "comm/transport.hpp"

namespace merak::comm {

enum class codec_kind { dense, coo, union_rows, s2 };

// S2 error feedback (the spec's step 7). `contractive` is the sound form:
// with ω = nnz(U)/(r·w) the gradient is Ĝ/(1+ω) and E_i ← G_i − U(T_i)/(1+ω).
// `plain` (E_i ← G_i − Ĝ) diverges when the sketch is narrower than the
// union; it exists to show that (tests, experiments), not for training.
enum class error_feedback { off, contractive, plain };

// S2's bucket hash (comm/count_sketch.hpp). `rows`: a gradient row lands as
// one contiguous run of d buckets at a start hashed from the row (when
// d <= w; narrower sketches hash elements); `elements`: every element is
// hashed on its own. Same collision probability 1/w between rows, both
// unbiased; rows makes sketching and decoding contiguous (docs/results/
// s2-reducer.md, "S2 design choices").
enum class sketch_hash { rows, elements };

// Everything a codec needs; equal on every rank (the driver checks).
struct codec_config {
  codec_kind kind = codec_kind::dense;
  // S2 only.
  int sketch_rows = 1;         // r, 1..32
  int64_t sketch_width = 0;    // w; 0: w = sketch_ratio · n·d / r (at least 1)
  double sketch_ratio = 0.01;  // r·w as a fraction of n·d, used when sketch_width = 0
  error_feedback feedback = error_feedback::off;
  sketch_hash hash = sketch_hash::rows;
  uint64_t seed = 0;  // shared by all ranks; mixed with the step number
};

// "dense", "coo", "union", "s2"; parse_codec_kind fails naming the text.
std::string_view codec_kind_name(codec_kind k);
codec_kind parse_codec_kind(std::string_view text);
std::string_view error_feedback_name(error_feedback f);
error_feedback parse_error_feedback(std::string_view text);  // "off|contractive|plain"
std::string_view sketch_hash_name(sketch_hash h);
sketch_hash parse_sketch_hash(std::string_view text);  // "rows|elements"

// What a codec hands to the collectives in one round. The spans point into
// the codec's buffers (or into the gradient itself for `dense`) and are
// reduced in place; empty ones are skipped.
struct codec_message {
  std::span<uint64_t> bits;           // bitwise OR over ranks
  std::span<float> sum;               // elementwise SUM over ranks
  std::span<const std::byte> gather;  // this rank's block for the all-gather
  bool has_gather = false;            // the round all-gathers (even a 0-byte block)
  // Filled by the reduction when has_gather: every rank's block, in rank order.
  std::vector<std::byte> gathered;
  std::vector<size_t> gathered_sizes;

  void clear() {
    bits = {}, sum = {}, gather = {}, has_gather = false;
    gathered.clear(), gathered_sizes.clear();
  }
};

class codec {
 public:
  virtual ~codec() = default;
  virtual const codec_config& config() const = 0;

  // Starts a step on this rank's gradient `grad` (n, d) of a group of
  // `ranks` ranks and fills round 0's message. `grad` belongs to the step
  // until decode returns: the codec reads it here (S2 with error feedback
  // also adds its error into it) and decode overwrites it. Fails (merak::error
  // naming n, d and the size) on a bad shape.
  virtual void encode(std::span<float> grad, int64_t n, int64_t d, int ranks,
                      codec_message& msg) = 0;
  // Called with the reduced message of the current round. Returns true with
  // the next round's message in `msg`, or false when decode can run.
  virtual bool advance(codec_message& msg) = 0;
  // Writes this rank's result, the (estimated) average over ranks, into
  // `grad` (the span given to encode). Rows outside the union are zero.
  virtual void decode(codec_message& msg, std::span<float> grad) = 0;

  // Optional, before encode: rows that hold all of the next gradient's
  // non-zeros (strictly increasing, each < n; rows listed may be zero), such
  // as the token ids of an embedding's batch. The next encode then skips its
  // scan of the whole gradient (one read of n·d floats) and fails naming the
  // first bad entry if the list is not increasing or not below n. Used by
  // one encode; `dense` ignores it.
  void set_known_rows(std::span<const uint32_t> rows) {
    known_.assign(rows.begin(), rows.end());
    has_known_ = true;
  }

  // After decode: rows of this rank's gradient that were non-zero, and rows
  // of the union over ranks (n for dense, which does not look).
  virtual int64_t own_rows() const = 0;
  virtual int64_t union_rows() const = 0;
  // Steps completed on this codec.
  virtual uint64_t step() const = 0;

 protected:
  // This step's non-zero rows of grad (n, d), increasing: the known rows
  // when set_known_rows was called (then forgotten; returns true), else a
  // scan (returns false).
  bool find_rows(std::span<const float> grad, int64_t n, int64_t d, std::vector<uint32_t>& rows);

 private:
  std::vector<uint32_t> known_;
  bool has_known_ = false;
};

// ||estimate - exact|| / ||exact|| accumulated in double (the absolute
// error when exact is zero): the error every codec benchmark and the
// reducer's diagnostic report.
double relative_l2_error(std::span<const float> estimate, std::span<const float> exact);

// Fails on a bad config (r out of range, negative width or ratio).
std::unique_ptr<codec> make_codec(const codec_config& config);

// --- pure reduction (no transport) ----------------------------------------

// Reduces one round of every rank's message as the collectives would, but in
// rank order: bits OR-ed, sums accumulated ((m_0 + m_1) + m_2)..., blocks
// concatenated; the result is written into every message. Fails naming the
// rank on messages of unequal shape.
void reduce_messages(std::span<codec_message* const> msgs);

// Runs one step of every rank's codec (codecs[i] on grads[i], all of size
// n·d) without a transport; each grads[i] ends holding rank i's result.
void run_codecs(std::span<codec* const> codecs, std::span<const std::span<float>> grads, int64_t n,
                int64_t d);

// --- driver over a transport ----------------------------------------------

struct codec_stats {
  double encode_s = 0;  // encode + advance (packing between rounds)
  double comm_s = 0;    // collectives, including the shape check
  double decode_s = 0;
  uint64_t bytes_sent = 0;  // this rank's transport bytes_sent() delta
  int64_t own_rows = 0;     // non-zero rows of this rank's gradient
  int64_t union_rows = 0;   // rows of the union (n for dense)
};

// Averages the row-sparse gradient `grad` (n, d) over the ranks of `t` in
// place with codec `c`. Collective: every rank calls it with the same n, d,
// codec config and step. First the ranks all-gather a small header (codec,
// n, d, gradient size, sketch shape, step); a mismatch, or a gradient that
// does not hold n·d floats, fails on every rank with a merak::error naming
// both headers and the peer rank. All its collectives use the one user tag
// `tag` (< kmax_collective_tag, see collectives.hpp): successive calls may
// reuse a tag, and collectives on other tags never see its messages. A
// group of one returns at once (the average of one gradient is itself; the
// codec does not run). `stats` (optional) receives this call's timings and
// bytes; `ring` sets the chunking of the all-reduces (equal on every rank). Transport failures
// (timeouts, dead peers) propagate as merak::error; the ranks' codecs are then out of step and must
// be remade.
void reduce_rows(codec& c, transport& t, std::span<float> grad, int64_t n, int64_t d, tag_t tag,
                 codec_stats* stats = nullptr, const ring_options& ring = {});

}  // namespace merak::comm
