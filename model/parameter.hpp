#pragma once
// Trainable parameters and the store that creates them.
//
// A parameter is named ("h0.attn.qkv.weight") and owns its value and its
// gradient. Layers hold shared pointers, so two layers that name the same
// parameter (the GPT LM head and the token embedding) share one value and
// accumulate into one gradient. Initial values depend only on (seed, name),
// never on creation order, so any partition of a model initialises each
// parameter exactly as the single-device model does.

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "model/tensor.hpp"

namespace merak::model {

enum class init_kind : uint8_t { normal, zeros, ones };

// Which part of a full parameter a tensor-parallel shard holds: dimension
// `dim` of the full shape is viewed as blocks, each split into `parts`
// slices separately, and the shard takes slice `index` of every block.
// The blocks are `groups` equal ones (groups = 3 for a fused QKV weight, so
// each shard gets its heads' rows of Q, K and V), or, where `blocks` is set,
// blocks[i] units of `unit` rows each (a grouped-query QKV: {heads, groups,
// groups} units of one head). A block of n units gives slice `index` units
// [index n / parts, (index + 1) n / parts) when parts divides n; when n
// divides parts instead it is replicated: slice `index` holds unit
// index / (parts / n), as parts / n shards do. dim < 0: the whole parameter
// (not sharded).
struct shard_spec {
  int dim = -1;
  int parts = 1;
  int index = 0;
  int groups = 1;
  shape_t full;                 // shape of the whole parameter
  std::vector<int64_t> blocks;  // units per block; empty: `groups` equal blocks
  int64_t unit = 1;             // rows of dimension `dim` per unit
  bool sharded() const { return dim >= 0; }
  // How many shards hold each slice of the replicated blocks (1: none is).
  int copies() const;
};

// "" when `s` splits s.full as stated, else what does not divide.
std::string shard_split_error(const shard_spec& s);
// The shape of shard `s.index` (s.full when not sharded).
shape_t shard_shape(const shard_spec& s);
// Calls f(begin, count) for the rows of dimension s.dim (in the full
// parameter) that shard s.index holds, in order; `replicated` says whether
// those rows are held by s.copies() shards.
void for_each_shard_block(const shard_spec& s,
                          const std::function<void(int64_t, int64_t, bool)>& f);

// Replicated blocks (copies() > 1, dim 0): their gradients are partial on
// each shard holding a slice, and summed over the shards. The packed form
// is the replicated blocks' whole rows, one after another (replicated_numel
// elements), this shard's rows at their place and zeros elsewhere, so that
// a sum over the group is the full gradient of every slice.
int64_t replicated_numel(const shard_spec& s);
// Calls f(offset in packed, offset in the shard, count) per replicated run.
void for_each_replicated_run(const shard_spec& s,
                             const std::function<void(int64_t, int64_t, int64_t)>& f);
// The sum of squares of the shard's elements in [begin, end) that lie in
// replicated rows (`part` float, on the host).
double replicated_sumsq(const shard_spec& s, const tensor& part, int64_t begin, int64_t end);

struct param_spec {
  std::string name;
  shape_t shape;
  init_kind init = init_kind::normal;
  float stddev = 0.02f;  // for init_kind::normal
  bool decay = true;     // AdamW weight decay applies (matrices, not biases or norms)
  shard_spec shard{};    // set by the TP rewrite; `shape` is then the shard's shape
};

// How the layers of a stage read a parameter's value under bf16
// activations: only through a copy rounded to bf16 (the GEMM weights), or
// as float somewhere (norms, biases, embedding tables), or not yet known.
enum class bf16_reads : uint8_t { none, rounded, exact };

struct parameter {
  param_spec spec;
  tensor value;
  tensor grad;
  // The value rounded to the activations' type, standing in for it where
  // only that is held: a GEMM weight (bf16_reads::rounded) of a bf16 run
  // with parameter shards, between its all-gather and its release
  // (distributed_adamw::unpack_values); `value` is then undefined, and the
  // layers that round read this instead.
  tensor lowp;
  // Set by the layers that read the value (note_reads); a parameter whose
  // every reader rounds may travel as bf16 in the distributed optimizer's
  // all-gathers: those readers see the same bits either way.
  bf16_reads reads = bf16_reads::none;
};

// A layer reads `p` rounded to bf16 (rounded) or as float (!rounded); one
// float reader makes it exact for good.
inline void note_reads(parameter& p, bool rounded) {
  if (!rounded)
    p.reads = bf16_reads::exact;
  else if (p.reads == bf16_reads::none)
    p.reads = bf16_reads::rounded;
}
using parameter_ptr = std::shared_ptr<parameter>;

class parameter_store {
 public:
  // Parameters (and their gradients) live on `where`; their initial values
  // are made on the host and copied there, so every device starts alike.
  explicit parameter_store(uint64_t seed, device where = device::cpu())
      : seed_(seed), where_(where) {}
  device where() const { return where_; }

  // Returns the parameter called spec.name, creating and initialising it on
  // first use. Throws merak::error if it exists with another shape.
  parameter_ptr get_or_create(const param_spec& spec);

  // Parameters in creation order (the order of checkpoints and optimizers).
  const std::vector<parameter_ptr>& all() const { return ordered_; }
  parameter_ptr find(const std::string& name) const;
  int64_t numel() const;
  void zero_grads();

 private:
  uint64_t seed_;
  device where_;
  std::vector<parameter_ptr> ordered_;
  std::map<std::string, parameter_ptr> by_name_;
};

// Deterministic initial value of a parameter (used by the store). A shard
// gets exactly its slice of the whole parameter's initial value, so a
// tensor-parallel run starts from the single-device run's weights.
void initialise(tensor& value, const param_spec& spec, uint64_t seed);

// The shard's slice of `full` (shape s.full) copied into `part`, and back.
void copy_shard(const tensor& full, tensor& part, const shard_spec& s);
void place_shard(tensor& full, const tensor& part, const shard_spec& s);

}  // namespace merak::model
