#pragma once
// Training checkpoints: a directory per checkpoint, named by its step
// (DIR/step_00000010), holding model.safetensors (the parameters, loadable
// from Python) and optimizer.safetensors (AdamW moments), plus DIR/latest
// naming the newest one. Each file is written atomically and checksummed;
// a checkpoint directory appears (by rename) only once complete.
// Format: docs/checkpoint-format.md.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "model/adamw.hpp"
#include "model/parameter.hpp"

namespace merak::model {

using metadata_map = std::map<std::string, std::string>;

// Writes checkpoint `step` under `dir` (created if needed) and points
// DIR/latest at it. `metadata` goes into both files (e.g. "merak.model" with
// the model shape, "merak.step"). Returns the checkpoint's directory.
std::string save_checkpoint(const std::string& dir, int64_t step, const parameter_store& params,
                            const adamw& opt, const metadata_map& metadata);

// Writes a single-device checkpoint's two files (model.safetensors with the
// parameters by name, optimizer.safetensors with "m.NAME" and "v.NAME")
// into `dir`, fsync'd, each with `metadata`. Vectors are parallel.
void write_single_device_files(const std::string& dir, const std::vector<std::string>& names,
                               const std::vector<const tensor*>& values,
                               const std::vector<const tensor*>& first_moments,
                               const std::vector<const tensor*>& second_moments,
                               const metadata_map& metadata);

// "step_00000010": the directory name of the checkpoint of `step`.
std::string checkpoint_name(int64_t step);

// Metadata field `key` of checkpoint `dir` as a count: decimal digits only,
// from 0 to 2^53. Throws merak::error naming the checkpoint, the field and
// the value when it is missing or anything else.
int64_t metadata_count(const metadata_map& meta, const std::string& key, const std::string& dir);

// Publishes DIR/NAME.tmp, a complete and fsync'd checkpoint, as DIR/NAME
// and points DIR/latest at it. Crash-safe at every point: a checkpoint of
// the same name that is already there is first moved aside to NAME.old
// (which resolve_checkpoint falls back to) and removed only once `latest`
// is durable. Returns DIR/NAME. Throws merak::error naming the path.
std::string publish_checkpoint(const std::string& dir, const std::string& name);

// Resolves `path`: a run directory with a `latest` pointer, or one
// checkpoint's directory (either format: model.safetensors, or a sharded
// checkpoint's index.json). Throws merak::error naming the path if neither.
std::string resolve_checkpoint(const std::string& path);

// Reads the metadata of the checkpoint at `path` (see resolve_checkpoint).
metadata_map read_checkpoint_metadata(const std::string& path);

// Loads parameters and optimizer state from the checkpoint at `path` into
// `params` and `opt`. Every parameter must be present with the same shape;
// otherwise throws merak::error naming the file and the tensor. Returns the
// checkpoint's metadata.
metadata_map load_checkpoint(const std::string& path, parameter_store& params, adamw& opt);

}  // namespace merak::model
