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

// Merak's own entries in a run directory, told by name: a checkpoint
// (step_ and 8 or more digits), one a save of the same step moved aside
// (NAME.old), one being assembled (NAME.tmp); anything else is `none`.
enum class run_entry { none, checkpoint, moved_aside, assembling };
run_entry run_entry_of(const std::string& name);

// `text` as an error message shows it: control characters as '?', and past
// `most` characters cut to them and "...(N bytes)".
std::string shown_value(const std::string& text, size_t most = 80);

// The checkpoint name in DIR/latest: its first line without a trailing
// "\r". Throws merak::error naming the file when it is not a regular file
// (a FIFO would block the read), longer than a name can be, or not a name
// of an entry of DIR.
std::string read_latest(const std::string& dir);

// What `dir` holds of a run, in words ("latest: step 4", "2 checkpoints
// (step_00000002 .. step_00000004), no latest"), or "" when it holds
// neither latest nor a checkpoint: a new or empty directory, or one of a
// run stopped before its first checkpoint (config.toml, step_*.tmp), which
// a restart of that run (merak launch --max-restarts) starts again. Never
// throws.
std::string describe_run(const std::string& dir);

// Whether `a` and `b` name the same directory (through links, ".." and a
// trailing separator; neither need exist).
bool same_directory(const std::string& a, const std::string& b);

// Whether `path` (a --load) is the run directory `dir` or a checkpoint in it.
bool part_of_run(const std::string& path, const std::string& dir);

// Whether a run resuming from `path` finds nothing there to resume: `path`
// does not exist, or is a directory without latest, a checkpoint's files or
// a checkpoint entry. Throws merak::error naming `path` when it cannot be
// examined (a symbolic-link loop, no permission).
bool nothing_to_resume(const std::string& path);

// Removes the run in `dir`: latest, config.toml and every entry of
// run_entry_of; other files stay. Throws merak::error naming what cannot
// be removed.
void remove_run(const std::string& dir);

// Removes the checkpoints being assembled in `dir` (step_*.tmp): those of a
// save that failed or was killed.
void sweep_assembling(const std::string& dir);

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
