#pragma once
// The distributed optimizer (Megatron-LM's --use-distributed-optimizer,
// ZeRO stage 1) of one stage shard in one data-parallel replica: AdamW whose
// moments are sharded over the d replicas.
//
// Layout: the stage's gradient buckets (model/grad_buckets.hpp), each a flat
// buffer holding its parameters' elements end to end in bucket order. Rank
// r of d owns slice even_shard(bucket numel, d, r) of every bucket: the
// reduce-scatter leaves it that slice of the summed gradient, it keeps the
// AdamW moments of that slice only (8/d bytes a parameter instead of 8),
// updates the parameter values there, and the all-gather of the updated
// values restores whole parameters on every replica. Every replica builds
// the same layout from the same buckets.
//
// Gradient shards (ZeRO stage 2, --data-parallel-sharding-strategy
// optim_grads): for the buckets keep_gradient_shards marks, the summed
// gradient of the owned slice lives here (add_owned_gradient, once per
// reduce-scatter, so several micro-batches accumulate) instead of in the
// parameters' gradients, which the caller may then release; the norm and
// the step read it from here. Unmarked buckets (tied weights, the sparse
// embedding) keep whole gradients in the parameters.
//
// Parameter shards (ZeRO stage 3, optim_grads_params): after
// keep_value_shards the owned slice of every bucket's values lives here
// too; the step updates it there, pack_owned_values reads it, and the
// parameters' values may be released (release_values) between uses, made
// whole again by an all-gather and unpack_values.
//
// Arithmetic: each element is updated by adamw_update_host, the formula of
// adamw::step, so a replica's slices get the bits the unsharded optimizer
// would give the same gradients.
//
// Parameters on a device: the state (moments, gradient shards, and the
// owned values, kept as value shards from the start) lives in host memory,
// where the update runs; a device gradient's owned pieces are copied to the
// host for the norm and the update, and gathered values copied onto the
// device (unpack_values). Every parameter on one device.

#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "model/adamw.hpp"

namespace merak::model {

class distributed_adamw {
 public:
  // `buckets`: parameter indices (into `params`) of each bucket, in bucket
  // order; every parameter in exactly one bucket. Throws merak::error
  // otherwise, or for a parameter off the host.
  distributed_adamw(adamw_config cfg, std::vector<parameter_ptr> params,
                    std::vector<std::vector<int>> buckets, int ranks, int rank);

  // A run of one parameter's elements inside a bucket's flat buffer.
  struct piece {
    int param = 0;
    int64_t begin = 0, end = 0;  // elements of the parameter
    int64_t flat = 0;            // where element `begin` sits in the flat buffer
  };

  int buckets() const { return int(buckets_.size()); }
  const std::vector<int>& bucket_params(int b) const { return buckets_[size_t(b)]; }
  int bucket_of(int param) const { return bucket_of_[size_t(param)]; }
  int64_t bucket_numel(int b) const { return numel_[size_t(b)]; }
  // [begin, end) of bucket b's flat buffer this rank owns.
  std::pair<int64_t, int64_t> owned(int b) const { return owned_[size_t(b)]; }
  // The owned slice of bucket b, as runs of parameters, in flat order.
  const std::vector<piece>& owned_pieces(int b) const { return pieces_[size_t(b)]; }

  // Bucket b's owned gradient lives here for every b with sharded[b] != 0
  // (one flag per bucket); zeros until add_owned_gradient.
  void keep_gradient_shards(const std::vector<char>& sharded);
  bool gradient_sharded(int b) const { return sharded_.at(size_t(b)) != 0; }
  // g[owned(b)] += owned_sum (owned(b).second - owned(b).first floats).
  void add_owned_gradient(int b, const float* owned_sum);
  void zero_gradient_shards();
  // Bytes of gradient shards held.
  int64_t gradient_shard_bytes() const;

  // Sum of squares (double) of the owned gradient elements of the parameters
  // for which counts(param index) holds, in layout order.
  double owned_sumsq(const std::function<bool(int)>& counts) const;
  // One AdamW step on the owned elements (grad_scale: the clip factor); with
  // zero_grads every gradient is zeroed after, owned or not (the shards
  // too; a released, undefined parameter gradient stays released).
  void step(float lr, float grad_scale, bool zero_grads);

  // flat[owned(b)] <- the owned values (before the all-gather); `flat` a
  // tensor of bucket_numel(b) floats on the host or on the parameters'
  // device (the owned slice is copied there whole).
  void pack_owned_values(int b, float* flat) const;
  void pack_owned_values(int b, tensor& flat) const;
  // The parameters of bucket b <- a whole flat buffer of values (after it),
  // a tensor of bucket_numel(b) floats on the host or on the parameters'
  // device, onto the parameters' device;
  // released values are allocated there again. With parameter shards and
  // `rounded_as` not f32, the parameters every reader rounds
  // (bf16_reads::rounded) get only their `lowp` in that type (rounded from
  // the flat buffer, which holds them rounded already after a host bf16
  // all-gather, whole after a device's float one), not `value`.
  void unpack_values(int b, const tensor& flat, dtype rounded_as = dtype::f32);
  // The device the parameters live on.
  device where() const { return where_; }
  // Bytes bucket b's parameters hold as values (value and lowp).
  int64_t held_value_bytes(int b) const;

  // Parameter shards: the owned slices taken from the parameters' values
  // (all of them must be present), kept here from now on (already so for
  // device parameters).
  void keep_value_shards();
  bool values_sharded() const { return !vals_.empty(); }
  // The owned slices <- the parameters' values again (a checkpoint was
  // loaded into them).
  void take_owned_values();
  // Bucket b's parameters let go of their values (value and lowp undefined).
  void release_values(int b);
  // Bytes of value shards held.
  int64_t value_shard_bytes() const;
  // The element ranges [begin, end) of bucket b's flat buffer, sorted,
  // whose parameters are read as float under bf16 activations (every
  // parameter not bf16_reads::rounded): what a bf16 all-gather of the
  // values must still carry exactly (comm::allgather_shards_bf16).
  std::vector<std::pair<size_t, size_t>> exact_ranges(int b) const;
  // The owned values of piece `pc` of owned_pieces(b): pc.end - pc.begin
  // floats, from the value shards when kept, else from the parameter.
  const float* piece_values(int b, const piece& pc) const;
  // The moments (m, v) of piece `pc` of owned_pieces(b): pc.end - pc.begin
  // floats each.
  std::pair<const float*, const float*> piece_moments(int b, const piece& pc) const;
  // This rank's slice of every moment <- whole per-parameter moments
  // (a checkpoint's), m and v parallel to the parameters.
  void set_moments(const std::vector<tensor>& m, const std::vector<tensor>& v);
  // The same for parameter p alone, and with value shards kept, its owned
  // values <- `value` (whole, host; null: the values are not touched). A
  // loader reads one parameter at a time and lets it go after, so a load
  // holds one whole tensor beyond the slices.
  void load_parameter(int p, const tensor* value, const tensor& m, const tensor& v);

  int64_t t() const { return t_; }
  void set_t(int64_t t) { t_ = t; }
  // Bytes of moments held (both, this rank).
  int64_t moment_bytes() const;

 private:
  // Where the owned gradient of piece pc of bucket b lies (pc.end - pc.begin floats).
  float* piece_gradient(size_t b, const piece& pc) const;

  adamw_config cfg_;
  std::vector<parameter_ptr> params_;
  std::vector<std::vector<int>> buckets_;
  std::vector<int64_t> numel_;
  std::vector<std::pair<int64_t, int64_t>> owned_;
  std::vector<std::vector<piece>> pieces_;
  std::vector<int> bucket_of_;      // per parameter
  std::vector<int64_t> offset_in_;  // per parameter: its first element's place in its bucket
  std::vector<tensor> m_, v_;       // per bucket, the owned slice
  std::vector<char> sharded_;       // per bucket: its owned gradient is in g_
  mutable std::vector<std::vector<float>>
      g_;  // per bucket, the owned gradient (empty: in the parameters)
  // Per bucket, the owned values (empty: in the parameters).
  mutable std::vector<std::vector<float>> vals_;
  // Where the owned value of piece pc of bucket b lies.
  float* piece_value(size_t b, const piece& pc) const;
  // out[flat position - origin] <- the owned values of bucket b.
  void pack_owned_into(int b, float* out, int64_t origin) const;
  int64_t t_ = 0;
  device where_ = device::cpu();  // the parameters'
  mutable tensor scratch_;        // a device gradient's piece, on the host
};

}  // namespace merak::model
