#include "model/checkpoint.hpp"

#include <cstring>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "core/error.hpp"
#include "model/safetensors.hpp"

namespace merak::model {
namespace {

namespace fs = std::filesystem;
constexpr const char* kModelFile = "model.safetensors";
constexpr const char* kOptimizerFile = "optimizer.safetensors";
constexpr const char* kLatest = "latest";

void copy_into(tensor& dst, const safetensors_file& f, const std::string& name,
               const std::string& file) {
  auto it = f.tensors.find(name);
  if (it == f.tensors.end()) fail("checkpoint '{}' has no tensor '{}'", file, name);
  const tensor& src = it->second;
  if (src.shape() != dst.shape() || src.type() != dst.type())
    fail(
        "checkpoint '{}': tensor '{}' has shape {} but this model needs {} (a checkpoint of "
        "another model shape?)",
        file, name, shape_str(src.shape()), shape_str(dst.shape()));
  std::memcpy(dst.raw(), src.raw(), src.bytes());
}

}  // namespace

std::string save_checkpoint(const std::string& dir, int64_t step, const parameter_store& params,
                            const adamw& opt, const metadata_map& metadata) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) fail("cannot create checkpoint directory '{}': {}", dir, ec.message());
  const std::string name = fmt::format("step_{:08d}", step);
  const fs::path final_dir = fs::path(dir) / name;
  const fs::path tmp_dir = fs::path(dir) / (name + ".tmp");
  fs::remove_all(tmp_dir, ec);
  fs::create_directories(tmp_dir, ec);
  if (ec) fail("cannot create '{}': {}", tmp_dir.string(), ec.message());

  std::vector<std::pair<std::string, const tensor*>> model_tensors, opt_tensors;
  for (auto& p : params.all()) model_tensors.emplace_back(p->spec.name, &p->value);
  for (size_t i = 0; i < opt.params().size(); ++i) {
    opt_tensors.emplace_back("m." + opt.params()[i]->spec.name, &opt.first_moments()[i]);
    opt_tensors.emplace_back("v." + opt.params()[i]->spec.name, &opt.second_moments()[i]);
  }
  metadata_map meta = metadata;
  meta["merak.step"] = std::to_string(step);
  meta["merak.adam_t"] = std::to_string(opt.t());
  write_safetensors((tmp_dir / kModelFile).string(), model_tensors, meta);
  write_safetensors((tmp_dir / kOptimizerFile).string(), opt_tensors, meta);
  // Publish the complete checkpoint by renaming its directory.
  fs::remove_all(final_dir, ec);
  fs::rename(tmp_dir, final_dir, ec);
  if (ec)
    fail("cannot rename '{}' to '{}': {}", tmp_dir.string(), final_dir.string(), ec.message());
  fsync_directory(dir);
  write_file_atomic((fs::path(dir) / kLatest).string(), name + "\n");
  return final_dir.string();
}

std::string resolve_checkpoint(const std::string& path) {
  fs::path p(path);
  if (!fs::exists(p)) fail("checkpoint path '{}' does not exist", path);
  if (fs::exists(p / kModelFile)) return p.string();
  if (fs::exists(p / kLatest)) {
    std::ifstream f(p / kLatest);
    std::string name;
    std::getline(f, name);
    if (name.empty() || name.find('/') != std::string::npos)
      fail("'{}' does not name a checkpoint", (p / kLatest).string());
    fs::path c = p / name;
    if (!fs::exists(c / kModelFile))
      fail("'{}' points at '{}', which holds no {}", (p / kLatest).string(), c.string(),
           kModelFile);
    return c.string();
  }
  fail("'{}' is neither a checkpoint directory (no {}) nor a run directory (no {})", path,
       kModelFile, kLatest);
}

metadata_map read_checkpoint_metadata(const std::string& path) {
  auto dir = fs::path(resolve_checkpoint(path));
  return read_safetensors((dir / kModelFile).string()).metadata;
}

metadata_map load_checkpoint(const std::string& path, parameter_store& params, adamw& opt) {
  auto dir = fs::path(resolve_checkpoint(path));
  auto model_path = (dir / kModelFile).string();
  auto opt_path = (dir / kOptimizerFile).string();
  auto mf = read_safetensors(model_path);
  auto of = read_safetensors(opt_path);
  if (mf.metadata != of.metadata)
    fail("'{}' and '{}' come from different checkpoints", model_path, opt_path);
  if (mf.tensors.size() != params.all().size())
    fail("checkpoint '{}' holds {} tensors but this model has {} parameters (another model shape?)",
         model_path, mf.tensors.size(), params.all().size());
  for (auto& p : params.all()) copy_into(p->value, mf, p->spec.name, model_path);
  for (size_t i = 0; i < opt.params().size(); ++i) {
    copy_into(opt.first_moments()[i], of, "m." + opt.params()[i]->spec.name, opt_path);
    copy_into(opt.second_moments()[i], of, "v." + opt.params()[i]->spec.name, opt_path);
  }
  try {
    opt.set_t(std::stoll(mf.metadata.at("merak.adam_t")));
  } catch (const std::exception&) {
    fail("checkpoint '{}': metadata field merak.adam_t is missing or not a number", model_path);
  }
  return mf.metadata;
}

}  // namespace merak::model
