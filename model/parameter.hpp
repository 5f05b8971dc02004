#pragma once
// Trainable parameters and the store that creates them.
//
// A parameter is named ("h0.attn.qkv.weight") and owns its value and its
// gradient. Layers hold shared pointers, so two layers that name the same
// parameter (the GPT LM head and the token embedding) share one value and
// accumulate into one gradient. Initial values depend only on (seed, name),
// never on creation order, so any partition of a model initialises each
// parameter exactly as the single-device model does.

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "model/tensor.hpp"

namespace merak::model {

enum class init_kind : uint8_t { normal, zeros, ones };

// Which part of a full parameter a tensor-parallel shard holds: dimension
// `dim` of the full shape is viewed as `groups` equal blocks, each split into
// `parts` equal slices, and the shard takes slice `index` of every block
// (groups = 3 for a fused QKV weight, so each shard gets its heads' rows of
// Q, K and V). dim < 0: the whole parameter (not sharded).
struct shard_spec {
  int dim = -1;
  int parts = 1;
  int index = 0;
  int groups = 1;
  shape_t full;  // shape of the whole parameter
  bool sharded() const { return dim >= 0; }
};

struct param_spec {
  std::string name;
  shape_t shape;
  init_kind init = init_kind::normal;
  float stddev = 0.02f;  // for init_kind::normal
  bool decay = true;     // AdamW weight decay applies (matrices, not biases or norms)
  shard_spec shard{};    // set by the TP rewrite; `shape` is then the shard's shape
};

struct parameter {
  param_spec spec;
  tensor value;
  tensor grad;
};
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
