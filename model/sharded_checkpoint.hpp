#pragma once
// Sharded checkpoints: every stage actor (of replica 0) writes the slices of
// the parameters and AdamW moments it holds into a file of its own, in
// parallel, and the coordinator writes index.json naming each tensor's
// slices; the checkpoint appears (its directory renamed into place, then
// DIR/latest) only once every file is durable. Format:
// docs/checkpoint-format.md, "Sharded checkpoints".
//
// checkpoint_reader reads both formats (sharded and the single-device
// model.safetensors + optimizer.safetensors) and hands out whole tensors,
// so any saved layout loads into any other layout, process count, or the
// single device.

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "model/checkpoint.hpp"
#include "model/parameter.hpp"
#include "model/tensor.hpp"

namespace merak::model {

// One parameter slice in a shard file: the file (relative to the checkpoint
// directory), the parameter, how its slice sits in the whole tensor
// (spec.sharded() false: the whole tensor), and the whole tensor's shape.
//
// A moment piece (the distributed optimizer's: each data-parallel replica
// keeps the AdamW moments of some elements only) holds "m.NAME@BEGIN" and
// "v.NAME@BEGIN": elements [begin, end) of the holder's part (its TP slice,
// or the whole tensor) in row-major order, as 1-D tensors. With
// `with_values` (parameter shards: each replica keeps the values of those
// elements only) it holds "NAME@BEGIN" too, and no slice holds the values:
// a tensor's values are in its slices or in all of its pieces, never both.
struct shard_record {
  std::string file;
  std::string name;
  shard_spec spec;
  shape_t full;
  bool moment_piece = false;
  int64_t begin = 0, end = 0;  // a moment piece's elements
  bool with_values = false;    // a moment piece that holds the values too
};

// "shard-s003-t001.safetensors": stage 3, TP shard 1.
std::string shard_file_name(int stage, int tp_rank);
// "shard-s003-t001-d002.safetensors": the moment pieces of replica 2.
std::string moment_file_name(int stage, int tp_rank, int dp_rank);

// Writes `params` (value under its name, moments as "m.NAME" / "v.NAME") of
// one stage shard to DIR/FILE (atomically, fsync'd); returns their records.
// `first_moments`/`second_moments` are parallel to `params`, or both empty:
// the values alone (their moments are written as pieces).
std::vector<shard_record> write_shard(const std::string& dir, const std::string& file,
                                      const std::vector<const parameter*>& params,
                                      const std::vector<const tensor*>& first_moments,
                                      const std::vector<const tensor*>& second_moments,
                                      const metadata_map& metadata);

// One moment piece to write: elements [begin, end) of the holder's part of
// the parameter `spec` names, its moments m[0, end - begin), v likewise,
// and its values likewise when `value` is set.
struct moment_piece {
  const param_spec* spec = nullptr;
  int64_t begin = 0, end = 0;
  const float* m = nullptr;
  const float* v = nullptr;
  const float* value = nullptr;
};
// Writes the pieces to DIR/FILE (atomically, fsync'd); returns their
// records.
std::vector<shard_record> write_moment_pieces(const std::string& dir, const std::string& file,
                                              const std::vector<moment_piece>& pieces,
                                              const metadata_map& metadata);

// The directory a checkpoint of `step` is assembled in before it is
// published (DIR/step_XXXXXXXX.tmp), created empty; every other
// step_*.tmp in DIR (a save that failed or was killed) is removed first.
// Throws merak::error.
std::string begin_checkpoint(const std::string& dir, int64_t step);

// Removes an assembled checkpoint that will not be published (its save
// failed). Never throws: what stays is swept by the next begin_checkpoint.
void discard_checkpoint(const std::string& tmp_dir);

// Writes index.json into the assembled directory (records of every shard;
// `metadata` with merak.step and merak.adam_t; `layout` as "dp=.. pp=.. tp=.."
// for information), then publishes it (publish_checkpoint). Returns the
// checkpoint's directory. Throws merak::error naming a missing file or
// parameter.
std::string commit_sharded_checkpoint(const std::string& dir, int64_t step,
                                      const std::vector<shard_record>& records,
                                      const metadata_map& metadata, const std::string& layout);

// Reads one checkpoint of either format. Thread-safe; shard files are read
// once, on first use.
class checkpoint_reader {
 public:
  // `path`: a run directory (its latest) or a checkpoint directory. Throws
  // merak::error naming the path when it is neither, or the index when it
  // does not parse.
  explicit checkpoint_reader(const std::string& path);
  const std::string& dir() const { return dir_; }
  bool sharded() const { return sharded_; }
  // merak.* metadata, with merak.step and merak.adam_t.
  const metadata_map& metadata() const { return metadata_; }
  // Parameter names (without the m./v. moments).
  std::vector<std::string> parameters() const;
  // The whole tensor "NAME", "m.NAME" or "v.NAME", assembled from its
  // slices. Throws merak::error naming the checkpoint and the tensor.
  tensor full(const std::string& key) const;
  // Index entries of a sharded checkpoint (empty for the other format).
  const std::vector<shard_record>& records() const { return records_; }
  const std::string& layout() const { return layout_; }

 private:
  struct file_cache;
  std::string dir_;
  bool sharded_ = false;
  metadata_map metadata_;
  std::vector<shard_record> records_;
  std::string layout_;
  std::shared_ptr<file_cache> cache_;
};

// Copies this holder's part of every parameter in `params` (and of its
// moments into `opt` when given) from `ckpt`; the AdamW step count too.
// Throws merak::error naming the checkpoint and tensor on a missing tensor
// or a shape that does not fit.
void load_parameters(const checkpoint_reader& ckpt, const std::vector<parameter*>& params,
                     adamw* opt);

// This holder's part of tensor `key` (its TP slice per spec.shard, or the
// whole tensor) into `dst`. Throws merak::error naming the checkpoint and
// the tensor on a missing tensor or a shape that does not fit.
void read_holder_part(const checkpoint_reader& ckpt, const std::string& key,
                      const param_spec& spec, tensor& dst);

// The AdamW step count a checkpoint was saved at (its "merak.adam_t"), for
// an optimizer that reads its moments its own way (the distributed
// optimizer: read_holder_part of "m.NAME" and "v.NAME" one parameter at a
// time, keeping a slice of each). Throws merak::error naming the checkpoint
// when it is missing or not a count.
int64_t load_adam_t(const checkpoint_reader& ckpt);

// Writes `ckpt` as a single-device checkpoint under `out` (model and
// optimizer files, out/latest). Returns the checkpoint's directory.
std::string export_single_device(const checkpoint_reader& ckpt, const std::string& out);

}  // namespace merak::model
