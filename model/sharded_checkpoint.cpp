#include "model/sharded_checkpoint.hpp"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/checksum.hpp"
#include "core/error.hpp"
#include "core/files.hpp"
#include "model/gpt.hpp"
#include "model/model_metadata.hpp"
#include "model/safetensors.hpp"

namespace merak::model {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
constexpr const char* kIndex = "index.json";
constexpr const char* kFormat = "merak-sharded-1";
constexpr const char* kModelFile = "model.safetensors";
constexpr const char* kOptimizerFile = "optimizer.safetensors";

json spec_json(const shard_spec& s) {
  json j = {{"dim", s.dim}, {"parts", s.parts}, {"index", s.index}, {"groups", s.groups}};
  if (!s.blocks.empty()) {
    j["blocks"] = s.blocks;
    j["unit"] = s.unit;
  }
  return j;
}

constexpr const char* kSlicesKey = "merak.slices";
constexpr const char* kIndexCrc = "crc32c";

// What one shard file holds, as the file's own metadata (kSlicesKey) and
// as the index says: by tensor key ("w", or "m.w@BEGIN" for a moment
// piece), its slice and whole shape.
json slices_json(const std::vector<const shard_record*>& records) {
  json out = json::object();
  for (auto* r : records) {
    json s = spec_json(r->spec);
    s["shape"] = r->full;
    if (r->moment_piece) s["elements"] = {r->begin, r->end};
    if (r->with_values) s["values"] = true;
    out[r->moment_piece ? fmt::format("m.{}@{}", r->name, r->begin) : r->name] = std::move(s);
  }
  return out;
}

// `metadata` with the file's own slices added.
metadata_map with_slices(metadata_map metadata, const std::vector<shard_record>& records) {
  std::vector<const shard_record*> ptrs;
  for (auto& r : records) ptrs.push_back(&r);
  metadata[kSlicesKey] = slices_json(ptrs).dump();
  return metadata;
}

// The index's checksum: "v1:" and the CRC-32C of its text as written with
// one-space indents, without this field.
std::string index_checksum(const json& index) {
  const std::string text = index.dump(1);
  return fmt::format("v1:{:08x}", crc32c(text.data(), text.size()));
}

// A field of the index, typed, or an error naming the index and the field.
template <typename T>
T field(const json& j, const char* key, const std::string& where) {
  auto it = j.find(key);
  if (it == j.end()) fail("{}: field '{}' is missing", where, key);
  try {
    return it->get<T>();
  } catch (const json::exception&) {
    fail("{}: field '{}' has the wrong type ({})", where, key, it->dump());
  }
}

// Every part of a tensor exactly once: one whole slice, or parts 0..P-1 of
// one split. Throws merak::error naming `where` and the tensor.
void check_complete(const std::string& where, const std::string& name,
                    const std::vector<const shard_record*>& slices) {
  if (slices.empty()) fail("{}: no slice of tensor '{}'", where, name);
  const shard_spec& first = slices.front()->spec;
  if (!first.sharded()) {
    if (slices.size() != 1)
      fail("{}: tensor '{}' is saved whole {} times", where, name, slices.size());
    return;
  }
  std::set<int> parts;
  for (auto* r : slices) {
    if (!r->spec.sharded() || r->spec.parts != first.parts || r->spec.dim != first.dim ||
        r->spec.groups != first.groups || r->spec.blocks != first.blocks ||
        r->spec.unit != first.unit)
      fail("{}: tensor '{}' has slices of different splits", where, name);
    if (!parts.insert(r->spec.index).second)
      fail("{}: tensor '{}' has slice {} of {} twice", where, name, r->spec.index, first.parts);
  }
  if (int(parts.size()) != first.parts)
    fail("{}: tensor '{}' has {} of its {} slices", where, name, parts.size(), first.parts);
}

// The value slices (moment pieces: false) or the moment pieces (true) of
// each tensor.
std::map<std::string, std::vector<const shard_record*>> by_tensor(
    const std::vector<shard_record>& records, bool moment_pieces = false) {
  std::map<std::string, std::vector<const shard_record*>> out;
  for (auto& r : records)
    if (r.moment_piece == moment_pieces) out[r.name].push_back(&r);
  return out;
}

int64_t part_numel(const shard_record& r) {
  return shape_numel(r.spec.sharded() ? shard_shape(r.spec) : r.full);
}

// A tensor's moment pieces cover every element of every part exactly once
// (the parts themselves as check_complete wants them). Throws merak::error
// naming `where` and the tensor.
void check_pieces(const std::string& where, const std::string& name,
                  const std::vector<const shard_record*>& pieces) {
  std::map<int, std::vector<const shard_record*>> by_part;
  for (auto* r : pieces) by_part[r->spec.sharded() ? r->spec.index : 0].push_back(r);
  std::vector<const shard_record*> one_each;
  for (auto& [index, list] : by_part) {
    std::sort(list.begin(), list.end(),
              [](const shard_record* a, const shard_record* b) { return a->begin < b->begin; });
    int64_t at = 0;
    for (auto* r : list) {
      if (r->begin != at || r->end <= r->begin)
        fail("{}: the moments of '{}' (part {}) have elements [{}, {}) after {}", where, name,
             index, r->begin, r->end, at);
      at = r->end;
    }
    if (at != part_numel(*list.front()))
      fail("{}: the moments of '{}' (part {}) cover {} of its {} elements", where, name, index, at,
           part_numel(*list.front()));
    one_each.push_back(list.front());
  }
  check_complete(where, "moments of " + name, one_each);
}

// Every tensor's values are in its slices or in every one of its moment
// pieces, not in both, and somewhere. Throws merak::error naming `where`
// and the tensor.
void check_values_places(const std::string& where, const std::vector<shard_record>& records) {
  struct counts {
    size_t slices = 0, pieces = 0, with = 0;
  };
  std::map<std::string, counts> by_name;
  for (auto& r : records) {
    auto& c = by_name[r.name];
    ++(r.moment_piece ? c.pieces : c.slices);
    if (r.with_values) ++c.with;
  }
  for (auto& [name, c] : by_name) {
    if (c.slices == 0 && c.with == 0) fail("{}: no slice of tensor '{}'", where, name);
    if (c.with > 0 && (c.with != c.pieces || c.slices > 0))
      fail("{}: tensor '{}' has its values in {} of its {} moment pieces and in {} slices (all "
           "pieces or the slices hold them)",
           where, name, c.with, c.pieces, c.slices);
  }
}

}  // namespace

std::string shard_file_name(int stage, int tp_rank) {
  return fmt::format("shard-s{:03d}-t{:03d}.safetensors", stage, tp_rank);
}

std::string moment_file_name(int stage, int tp_rank, int dp_rank) {
  return fmt::format("shard-s{:03d}-t{:03d}-d{:03d}.safetensors", stage, tp_rank, dp_rank);
}

std::vector<shard_record> write_moment_pieces(const std::string& dir, const std::string& file,
                                              const std::vector<moment_piece>& pieces,
                                              const metadata_map& metadata) {
  std::vector<tensor> held;  // the pieces' copies, alive until written
  held.reserve(3 * pieces.size());
  std::vector<std::pair<std::string, const tensor*>> tensors;
  std::vector<shard_record> records;
  std::set<std::string> keys;
  for (auto& p : pieces) {
    MERAK_CHECK(p.end > p.begin, "moment piece [{}, {}) of '{}'", p.begin, p.end, p.spec->name);
    MERAK_CHECK(keys.insert(fmt::format("m.{}@{}", p.spec->name, p.begin)).second,
                "moment pieces for '{}': 'm.{}@{}' twice", file, p.spec->name, p.begin);
    const std::string names[] = {fmt::format("m.{}@{}", p.spec->name, p.begin),
                                 fmt::format("v.{}@{}", p.spec->name, p.begin),
                                 fmt::format("{}@{}", p.spec->name, p.begin)};
    const float* sources[] = {p.m, p.v, p.value};
    for (int k = 0; k < 3; ++k) {
      if (!sources[k]) continue;
      held.emplace_back(shape_t{p.end - p.begin});
      std::memcpy(held.back().f32(), sources[k], held.back().bytes());
      tensors.emplace_back(names[k], &held.back());
    }
    shard_record r{file, p.spec->name, p.spec->shard,
                   p.spec->shard.sharded() ? p.spec->shard.full : p.spec->shape};
    r.moment_piece = true;
    r.with_values = p.value != nullptr;
    r.begin = p.begin;
    r.end = p.end;
    records.push_back(std::move(r));
  }
  write_safetensors((fs::path(dir) / file).string(), tensors, with_slices(metadata, records));
  return records;
}

std::vector<shard_record> write_shard(const std::string& dir, const std::string& file,
                                      const std::vector<const parameter*>& params,
                                      const std::vector<const tensor*>& first_moments,
                                      const std::vector<const tensor*>& second_moments,
                                      const metadata_map& metadata) {
  const bool moments = !first_moments.empty();
  MERAK_CHECK(first_moments.size() == second_moments.size() &&
                  (!moments || params.size() == first_moments.size()),
              "moments for {} parameters", params.size());
  std::vector<std::pair<std::string, const tensor*>> tensors;
  std::vector<shard_record> records;
  for (size_t i = 0; i < params.size(); ++i) {
    const auto& spec = params[i]->spec;
    tensors.emplace_back(spec.name, &params[i]->value);
    if (moments) {
      tensors.emplace_back("m." + spec.name, first_moments[i]);
      tensors.emplace_back("v." + spec.name, second_moments[i]);
    }
    records.push_back(
        {file, spec.name, spec.shard, spec.shard.sharded() ? spec.shard.full : spec.shape});
  }
  write_safetensors((fs::path(dir) / file).string(), tensors, with_slices(metadata, records));
  return records;
}

std::string begin_checkpoint(const std::string& dir, int64_t step) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) fail("cannot create checkpoint directory '{}': {}", dir, ec.message());
  sweep_assembling(dir);
  const fs::path tmp = fs::path(dir) / (checkpoint_name(step) + ".tmp");
  fs::create_directories(tmp, ec);
  if (ec) fail("cannot create '{}': {}", tmp.string(), ec.message());
  return tmp.string();
}

void discard_checkpoint(const std::string& tmp_dir) {
  std::error_code ec;
  fs::remove_all(tmp_dir, ec);
}

std::string commit_sharded_checkpoint(const std::string& dir, int64_t step,
                                      const std::vector<shard_record>& records,
                                      const metadata_map& metadata, const std::string& layout) {
  const std::string name = checkpoint_name(step);
  const fs::path tmp = fs::path(dir) / (name + ".tmp");
  for (auto& [tensor_name, slices] : by_tensor(records))
    check_complete("checkpoint " + tmp.string(), tensor_name, slices);
  for (auto& [tensor_name, pieces] : by_tensor(records, true))
    check_pieces("checkpoint " + tmp.string(), tensor_name, pieces);
  check_values_places("checkpoint " + tmp.string(), records);
  json tensors = json::object();
  for (auto& r : records) {
    if (!fs::exists(tmp / r.file))
      fail("checkpoint shard '{}' was not written", (tmp / r.file).string());
    auto& t = tensors[r.name];
    if (t.is_null()) t = {{"shape", r.full}, {"slices", json::array()}};
    if (t["shape"].get<shape_t>() != r.full)
      fail("checkpoint shards disagree on the shape of '{}': {} and {}", r.name,
           shape_str(t["shape"].get<shape_t>()), shape_str(r.full));
    if (r.moment_piece) {
      if (!t.contains("moments")) t["moments"] = json::array();
      json piece = {{"file", r.file}, {"shard", spec_json(r.spec)}, {"elements", {r.begin, r.end}}};
      if (r.with_values) piece["values"] = true;
      t["moments"].push_back(std::move(piece));
    } else {
      t["slices"].push_back({{"file", r.file}, {"shard", spec_json(r.spec)}});
    }
  }
  json index = {{"format", kFormat},
                {"layout", layout},
                {"metadata", metadata},
                {"tensors", std::move(tensors)}};
  index[kIndexCrc] = index_checksum(index);
  write_file_atomic((tmp / kIndex).string(), index.dump(1) + "\n");
  fsync_directory(tmp.string());
  return publish_checkpoint(dir, name);
}

struct checkpoint_reader::file_cache {
  std::mutex mu;
  std::map<std::string, std::shared_ptr<safetensors_file>> files;  // by file name
  // Called once per file, when it is first read (a sharded checkpoint's
  // check of the file against its index).
  std::function<void(const std::string&, const safetensors_file&)> verify;
  std::shared_ptr<safetensors_file> get(const std::string& dir, const std::string& file) {
    std::lock_guard lock(mu);
    auto& f = files[file];
    if (!f) {
      auto read =
          std::make_shared<safetensors_file>(read_safetensors((fs::path(dir) / file).string()));
      if (verify) verify(file, *read);
      f = std::move(read);
    }
    return f;
  }
};

namespace {

// A shard file is the one its index describes: the index's metadata (step,
// AdamW count, model, seed) in its own, and the slices the index places in
// it, no more and no fewer. Throws merak::error naming the file and the
// key.
void verify_shard(const std::string& path, const safetensors_file& f, const metadata_map& meta,
                  const std::vector<const shard_record*>& records) {
  auto cut = [](const std::string& s) { return s.size() > 200 ? s.substr(0, 200) + "..." : s; };
  for (auto& [key, value] : meta) {
    auto it = f.metadata.find(key);
    if (it == f.metadata.end())
      fail("checkpoint shard '{}' has no {} (the index has '{}')", path, key, cut(value));
    if (it->second != value)
      fail("checkpoint shard '{}' has {} '{}' but its index has '{}' (a shard of another "
           "checkpoint?)",
           path, key, cut(it->second), cut(value));
  }
  auto it = f.metadata.find(kSlicesKey);
  if (it == f.metadata.end()) {
    if (!verify_checksums()) return;
    fail("checkpoint shard '{}' does not say which slices it holds ({}; --skip-checksum loads it "
         "anyway)",
         path, kSlicesKey);
  }
  json own;
  try {
    own = json::parse(it->second);
  } catch (const json::exception&) {
    fail("checkpoint shard '{}': {} is not JSON", path, kSlicesKey);
  }
  const json said = slices_json(records);
  for (auto& [key, s] : said.items()) {
    if (!own.contains(key))
      fail("checkpoint shard '{}' does not hold '{}', which its index places there", path, key);
    if (own[key] != s)
      fail("checkpoint shard '{}' holds '{}' as {} but its index says {}", path, key,
           cut(own[key].dump()), cut(s.dump()));
  }
  for (auto& [key, s] : own.items())
    if (!said.contains(key))
      fail("checkpoint shard '{}' holds '{}', which its index does not place there", path, key);
}

}  // namespace

checkpoint_reader::checkpoint_reader(const std::string& path)
    : dir_(resolve_checkpoint(path)), cache_(std::make_shared<file_cache>()) {
  const fs::path d(dir_);
  sharded_ = fs::exists(d / kIndex);
  if (!sharded_) {
    auto model = cache_->get(dir_, kModelFile);
    auto opt = cache_->get(dir_, kOptimizerFile);
    if (model->metadata != opt->metadata)
      fail("'{}' and '{}' come from different checkpoints", (d / kModelFile).string(),
           (d / kOptimizerFile).string());
    metadata_ = model->metadata;
    return;
  }
  const std::string where = (d / kIndex).string();
  std::ifstream in(d / kIndex);
  if (!in) fail("cannot open checkpoint index '{}'", where);
  json index;
  try {
    index = json::parse(in);
  } catch (const json::exception& e) {
    fail("{}: not valid JSON: {}", where, e.what());
  }
  if (!index.is_object()) fail("{}: not a JSON object", where);
  if (!index.contains(kIndexCrc)) {
    if (verify_checksums())
      fail("{}: no checksum (field '{}'; --skip-checksum loads it anyway)", where, kIndexCrc);
  } else {
    const std::string said = field<std::string>(index, kIndexCrc, where);
    index.erase(kIndexCrc);
    if (const std::string own = index_checksum(index); own != said && verify_checksums())
      fail("{}: checksum {} does not match its contents ({}): the index was edited or damaged "
           "(--skip-checksum loads it anyway)",
           where, said, own);
  }
  if (auto f = field<std::string>(index, "format", where); f != kFormat)
    fail("{}: format '{}' is not {}", where, f, kFormat);
  layout_ = field<std::string>(index, "layout", where);
  metadata_ = field<metadata_map>(index, "metadata", where);
  auto tensors = field<json>(index, "tensors", where);
  if (!tensors.is_object()) fail("{}: field 'tensors' is not an object", where);
  for (auto& [name, t] : tensors.items()) {
    const std::string at = fmt::format("{}: tensor '{}'", where, name);
    auto full = field<shape_t>(t, "shape", at);
    auto slices = field<json>(t, "slices", at);
    if (!slices.is_array()) fail("{}: field 'slices' is not an array", at);
    json pieces = t.contains("moments") ? field<json>(t, "moments", at) : json::array();
    if (!pieces.is_array()) fail("{}: field 'moments' is not an array", at);
    for (auto& s : slices) s["elements"] = nullptr;  // a value slice
    for (auto& s : pieces)
      if (!s.is_object() || !s.contains("elements") || s["elements"].is_null())
        fail("{}: a moment piece without 'elements'", at);
    for (auto& s : slices) pieces.push_back(s);
    for (auto& s : pieces) {
      shard_record r;
      if (!s["elements"].is_null()) {
        auto range = field<std::vector<int64_t>>(s, "elements", at);
        if (range.size() != 2) fail("{}: 'elements' is not [begin, end]", at);
        r.moment_piece = true;
        r.begin = range[0];
        r.end = range[1];
        if (s.contains("values")) r.with_values = field<bool>(s, "values", at);
      }
      r.file = field<std::string>(s, "file", at);
      if (r.file.empty() || r.file.find('/') != std::string::npos || r.file[0] == '.')
        fail("{}: slice file '{}' is not a file name in the checkpoint directory", at, r.file);
      auto sp = field<json>(s, "shard", at);
      r.spec.dim = field<int>(sp, "dim", at);
      r.spec.parts = field<int>(sp, "parts", at);
      r.spec.index = field<int>(sp, "index", at);
      r.spec.groups = field<int>(sp, "groups", at);
      if (sp.contains("blocks")) {
        r.spec.blocks = field<std::vector<int64_t>>(sp, "blocks", at);
        r.spec.unit = field<int64_t>(sp, "unit", at);
      }
      r.spec.full = full;
      if (auto e = shard_split_error(r.spec); !e.empty()) fail("{}: {}", at, e);
      r.name = name;
      r.full = full;
      records_.push_back(std::move(r));
    }
  }
  for (auto& [name, slices] : by_tensor(records_)) check_complete(where, name, slices);
  for (auto& [name, pieces] : by_tensor(records_, true)) check_pieces(where, name, pieces);
  check_values_places(where, records_);
  cache_->verify = [dir = dir_, meta = metadata_, records = records_](
                       const std::string& file, const safetensors_file& f) {
    std::vector<const shard_record*> mine;
    for (auto& r : records)
      if (r.file == file) mine.push_back(&r);
    verify_shard((fs::path(dir) / file).string(), f, meta, mine);
  };
}

std::vector<std::string> checkpoint_reader::parameters() const {
  std::vector<std::string> out;
  if (sharded_) {
    std::set<std::string> seen;
    for (auto& r : records_)
      if (seen.insert(r.name).second) out.push_back(r.name);
    return out;
  }
  for (auto& [name, t] : cache_->get(dir_, kModelFile)->tensors) out.push_back(name);
  return out;
}

tensor checkpoint_reader::full(const std::string& key) const {
  const bool moment = key.rfind("m.", 0) == 0 || key.rfind("v.", 0) == 0;
  if (!sharded_) {
    const char* file = moment ? kOptimizerFile : kModelFile;
    auto f = cache_->get(dir_, file);
    auto it = f->tensors.find(key);
    if (it == f->tensors.end())
      fail("checkpoint '{}' has no tensor '{}'", (fs::path(dir_) / file).string(), key);
    return it->second.clone();
  }
  const std::string name = moment ? key.substr(2) : key;
  std::vector<const shard_record*> slices, pieces;
  for (auto& r : records_)
    if (r.name == name) (r.moment_piece ? pieces : slices).push_back(&r);
  if (slices.empty() && pieces.empty()) fail("checkpoint '{}' has no tensor '{}'", dir_, name);
  // Every part there exactly once (checked at open); the values in the
  // pieces when no slice holds them.
  tensor whole((slices.empty() ? pieces : slices).front()->full);
  if ((moment || slices.empty()) && !pieces.empty()) {
    // Each part from its pieces (elements in row-major order), then placed.
    std::map<int, tensor> parts;
    for (auto* r : pieces) {
      auto f = cache_->get(dir_, r->file);
      const std::string file = (fs::path(dir_) / r->file).string();
      const std::string piece_key = fmt::format("{}@{}", key, r->begin);
      auto it = f->tensors.find(piece_key);
      if (it == f->tensors.end())
        fail("checkpoint shard '{}' has no tensor '{}'", file, piece_key);
      const tensor& piece = it->second;
      if (piece.type() != dtype::f32 || piece.numel() != r->end - r->begin)
        fail("checkpoint shard '{}': tensor '{}' holds {} {} elements, the index says [{}, {})",
             file, key, piece.numel(), dtype_name(piece.type()), r->begin, r->end);
      const int index = r->spec.sharded() ? r->spec.index : 0;
      auto& part = parts[index];
      if (!part.defined()) {
        part = tensor(r->spec.sharded() ? shard_shape(r->spec) : whole.shape());
      }
      std::memcpy(part.f32() + r->begin, piece.f32(), piece.bytes());
    }
    for (auto* r : pieces)
      if (r->begin == 0) {
        auto& part = parts[r->spec.sharded() ? r->spec.index : 0];
        if (r->spec.sharded())
          place_shard(whole, part, r->spec);
        else
          std::memcpy(whole.raw(), part.raw(), whole.bytes());
      }
    return whole;
  }
  for (auto* r : slices) {
    auto f = cache_->get(dir_, r->file);
    const std::string file = (fs::path(dir_) / r->file).string();
    auto it = f->tensors.find(key);
    if (it == f->tensors.end()) fail("checkpoint shard '{}' has no tensor '{}'", file, key);
    const tensor& part = it->second;
    if (part.type() != whole.type())
      fail("checkpoint shard '{}': tensor '{}' has another element type than the index says", file,
           key);
    if (!r->spec.sharded()) {
      if (part.shape() != whole.shape())
        fail("checkpoint shard '{}': tensor '{}' has shape {} but the index says {}", file, key,
             shape_str(part.shape()), shape_str(whole.shape()));
      std::memcpy(whole.raw(), part.raw(), whole.bytes());
      continue;
    }
    shape_t want = shard_shape(r->spec);
    if (part.shape() != want)
      fail("checkpoint shard '{}': tensor '{}' has shape {} but slice {} of {} needs {}", file, key,
           shape_str(part.shape()), r->spec.index, r->spec.parts, shape_str(want));
    place_shard(whole, part, r->spec);
  }
  return whole;
}

void read_holder_part(const checkpoint_reader& ckpt, const std::string& key,
                      const param_spec& spec, tensor& dst) {
  tensor whole = ckpt.full(key);
  const shape_t& full = spec.shard.sharded() ? spec.shard.full : spec.shape;
  if (whole.shape() != full || whole.type() != dst.type())
    fail(
        "checkpoint '{}': tensor '{}' is {} {} but this model needs {} {} (a checkpoint of "
        "another model shape?)",
        ckpt.dir(), key, dtype_name(whole.type()), shape_str(whole.shape()),
        dtype_name(dst.type()), shape_str(full));
  tensor staged;  // a device destination is filled from the host
  tensor& to =
      dst.where().type == device::kind::cpu ? dst : (staged = tensor(dst.shape(), dst.type()));
  if (spec.shard.sharded())
    copy_shard(whole, to, spec.shard);
  else
    std::memcpy(to.raw(), whole.raw(), to.bytes());
  if (staged.defined()) copy_bytes(dst, 0, staged, 0, dst.bytes());
}

void load_parameters(const checkpoint_reader& ckpt, const std::vector<parameter*>& params,
                     adamw* opt) {
  MERAK_CHECK(!opt || opt->params().size() == params.size(), "optimizer of {} parameters for {}",
              opt ? opt->params().size() : 0, params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    read_holder_part(ckpt, params[i]->spec.name, params[i]->spec, params[i]->value);
    if (opt) {
      read_holder_part(ckpt, "m." + params[i]->spec.name, params[i]->spec,
                       opt->first_moments()[i]);
      read_holder_part(ckpt, "v." + params[i]->spec.name, params[i]->spec,
                       opt->second_moments()[i]);
    }
  }
  if (opt) opt->set_t(metadata_count(ckpt.metadata(), "merak.adam_t", ckpt.dir()));
}

int64_t load_adam_t(const checkpoint_reader& ckpt) {
  return metadata_count(ckpt.metadata(), "merak.adam_t", ckpt.dir());
}

namespace {

// A checkpoint of a built-in model holds exactly that model's parameters
// (a custom model's are its own business). Throws merak::error naming the
// checkpoint and the first tensor missing or extra.
void check_model_tensors(const checkpoint_reader& ckpt) {
  auto it = ckpt.metadata().find("merak.model");
  if (it == ckpt.metadata().end()) return;
  const json model = json::parse(it->second, nullptr, false);
  if (!model.is_object() || model.value("family", "") == "custom") return;
  const graph g = build_model(parse_model_metadata(it->second, ckpt.dir()));
  std::set<std::string> want;
  for (auto& n : g.nodes())
    for (auto& p : n.params) want.insert(p.name);
  const auto names = ckpt.parameters();
  const std::set<std::string> have(names.begin(), names.end());
  for (auto& name : want)
    if (!have.count(name))
      fail("checkpoint '{}' lacks tensor '{}' of its model {}", ckpt.dir(), name, it->second);
  for (auto& name : have)
    if (!want.count(name))
      fail("checkpoint '{}' holds tensor '{}', which its model {} does not have", ckpt.dir(), name,
           it->second);
}

}  // namespace

std::string export_single_device(const checkpoint_reader& ckpt, const std::string& out) {
  const int64_t step = metadata_count(ckpt.metadata(), "merak.step", ckpt.dir());
  check_model_tensors(ckpt);
  std::vector<std::string> names = ckpt.parameters();
  std::vector<tensor> values, m, v;
  for (auto& name : names) {
    values.push_back(ckpt.full(name));
    m.push_back(ckpt.full("m." + name));
    v.push_back(ckpt.full("v." + name));
  }
  auto ptrs = [](const std::vector<tensor>& ts) {
    std::vector<const tensor*> out;
    for (auto& t : ts) out.push_back(&t);
    return out;
  };
  const std::string tmp = begin_checkpoint(out, step);
  try {
    write_single_device_files(tmp, names, ptrs(values), ptrs(m), ptrs(v), ckpt.metadata());
    return publish_checkpoint(out, checkpoint_name(step));
  } catch (...) {
    discard_checkpoint(tmp);
    throw;
  }
}

}  // namespace merak::model
