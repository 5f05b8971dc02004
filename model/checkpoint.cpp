#include "model/checkpoint.hpp"

#include <charconv>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "core/error.hpp"
#include "model/safetensors.hpp"
#include "model/sharded_checkpoint.hpp"

namespace merak::model {
namespace {

namespace fs = std::filesystem;
constexpr const char* kModelFile = "model.safetensors";
constexpr const char* kOptimizerFile = "optimizer.safetensors";
constexpr const char* kIndexFile = "index.json";
constexpr const char* kLatest = "latest";

bool holds_checkpoint(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p / kModelFile, ec) || fs::is_regular_file(p / kIndexFile, ec);
}

}  // namespace

int64_t metadata_count(const metadata_map& meta, const std::string& key, const std::string& dir) {
  auto it = meta.find(key);
  if (it == meta.end()) fail("checkpoint '{}': metadata {} is missing", dir, key);
  const std::string& text = it->second;
  uint64_t v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() ||
      v > (uint64_t{1} << 53))
    fail("checkpoint '{}': metadata {} is '{}', not a count from 0 to 2^53", dir, key, text);
  return int64_t(v);
}

std::string checkpoint_name(int64_t step) {
  return fmt::format("step_{:08d}", step);
}

std::string publish_checkpoint(const std::string& dir, const std::string& name) {
  const fs::path final_dir = fs::path(dir) / name;
  const fs::path tmp_dir = fs::path(dir) / (name + ".tmp");
  const fs::path old_dir = fs::path(dir) / (name + ".old");
  std::error_code ec;
  // Without NAME, a NAME.old left by an interrupted save may be what latest
  // reaches: it stays until the new NAME is in place.
  if (fs::exists(final_dir, ec)) {
    fs::remove_all(old_dir, ec);
    fs::rename(final_dir, old_dir, ec);
    if (ec)
      fail("cannot move '{}' aside to '{}': {}", final_dir.string(), old_dir.string(),
           ec.message());
  }
  fs::rename(tmp_dir, final_dir, ec);
  if (ec)
    fail("cannot rename '{}' to '{}': {}", tmp_dir.string(), final_dir.string(), ec.message());
  fsync_directory(dir);
  write_file_atomic((fs::path(dir) / kLatest).string(), name + "\n");
  fs::remove_all(old_dir, ec);
  return final_dir.string();
}

void write_single_device_files(const std::string& dir, const std::vector<std::string>& names,
                               const std::vector<const tensor*>& values,
                               const std::vector<const tensor*>& first_moments,
                               const std::vector<const tensor*>& second_moments,
                               const metadata_map& metadata) {
  std::vector<std::pair<std::string, const tensor*>> model_tensors, opt_tensors;
  for (size_t i = 0; i < names.size(); ++i) {
    model_tensors.emplace_back(names[i], values[i]);
    opt_tensors.emplace_back("m." + names[i], first_moments[i]);
    opt_tensors.emplace_back("v." + names[i], second_moments[i]);
  }
  write_safetensors((fs::path(dir) / kModelFile).string(), model_tensors, metadata);
  write_safetensors((fs::path(dir) / kOptimizerFile).string(), opt_tensors, metadata);
  fsync_directory(dir);
}

std::string save_checkpoint(const std::string& dir, int64_t step, const parameter_store& params,
                            const adamw& opt, const metadata_map& metadata) {
  const std::string tmp_dir = begin_checkpoint(dir, step);
  std::vector<std::string> names;
  std::vector<const tensor*> values, m, v;
  MERAK_CHECK(opt.params().size() == params.all().size(), "optimizer of {} of {} parameters",
              opt.params().size(), params.all().size());
  for (size_t i = 0; i < opt.params().size(); ++i) {
    names.push_back(opt.params()[i]->spec.name);
    values.push_back(&opt.params()[i]->value);
    m.push_back(&opt.first_moments()[i]);
    v.push_back(&opt.second_moments()[i]);
  }
  metadata_map meta = metadata;
  meta["merak.step"] = std::to_string(step);
  meta["merak.adam_t"] = std::to_string(opt.t());
  write_single_device_files(tmp_dir, names, values, m, v, meta);
  return publish_checkpoint(dir, checkpoint_name(step));
}

std::string resolve_checkpoint(const std::string& path) {
  fs::path p(path);
  if (!fs::exists(p)) fail("checkpoint path '{}' does not exist", path);
  if (holds_checkpoint(p)) return p.string();
  if (fs::exists(p / kLatest)) {
    std::ifstream f(p / kLatest);
    std::string name;
    std::getline(f, name);
    if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..")
      fail("'{}' does not name a checkpoint", (p / kLatest).string());
    fs::path c = p / name;
    if (holds_checkpoint(c)) return c.string();
    // A save of the same step interrupted between its two renames.
    if (fs::path old = p / (name + ".old"); holds_checkpoint(old)) return old.string();
    fail("'{}' points at '{}', which holds no checkpoint ({} or {})", (p / kLatest).string(),
         c.string(), kModelFile, kIndexFile);
  }
  fail("'{}' is neither a checkpoint directory (no {} or {}) nor a run directory (no {})", path,
       kModelFile, kIndexFile, kLatest);
}

metadata_map read_checkpoint_metadata(const std::string& path) {
  return checkpoint_reader(path).metadata();
}

metadata_map load_checkpoint(const std::string& path, parameter_store& params, adamw& opt) {
  checkpoint_reader ckpt(path);
  const auto names = ckpt.parameters();
  if (names.size() != params.all().size())
    fail("checkpoint '{}' holds {} tensors but this model has {} parameters (another model shape?)",
         ckpt.dir(), names.size(), params.all().size());
  std::vector<parameter*> all;
  for (auto& p : params.all()) all.push_back(&*p);
  load_parameters(ckpt, all, &opt);
  return ckpt.metadata();
}

}  // namespace merak::model
