// Sharded checkpoints: slices written by their holders reassemble into the
// whole tensors; missing or inconsistent pieces are named; publishing is
// crash-safe.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/checksum.hpp"
#include "core/error.hpp"
#include "core/files.hpp"
#include "model/sharded_checkpoint.hpp"
#include "tests/model/test_util.hpp"

using namespace merak;
using namespace merak::model;
namespace fs = std::filesystem;

namespace {

struct temp_dir {
  fs::path path;
  explicit temp_dir(const char* tag)
      : path(fs::temp_directory_path() / (std::string(tag) + std::to_string(::getpid()))) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~temp_dir() { fs::remove_all(path); }
};

// A (4, 6) weight split by rows into 2 TP slices, and a bias kept whole.
struct sample {
  tensor weight = test::random_tensor({4, 6}, 1), m = test::random_tensor({4, 6}, 2),
         v = test::random_tensor({4, 6}, 3), bias = test::random_tensor({6}, 4),
         bm = test::random_tensor({6}, 5), bv = test::random_tensor({6}, 6);
  parameter part[2], whole_bias;
  tensor pm[2], pv[2];
  sample() {
    for (int k = 0; k < 2; ++k) {
      shard_spec s{0, 2, k, 1, {4, 6}};
      part[k].spec = {"w", {2, 6}};
      part[k].spec.shard = s;
      part[k].value = tensor({2, 6});
      pm[k] = tensor({2, 6});
      pv[k] = tensor({2, 6});
      copy_shard(weight, part[k].value, s);
      copy_shard(m, pm[k], s);
      copy_shard(v, pv[k], s);
    }
    whole_bias.spec = {"b", {6}};
    whole_bias.value = bias.clone();
  }
  // Writes both shards (the bias with shard 0) and commits step `step`.
  std::string save(const fs::path& dir, int64_t step) {
    auto tmp = begin_checkpoint(dir.string(), step);
    const metadata_map meta{{"merak.step", std::to_string(step)}, {"merak.adam_t", "7"}};
    auto r0 = write_shard(tmp, shard_file_name(0, 0), {&part[0], &whole_bias}, {&pm[0], &bm},
                          {&pv[0], &bv}, meta);
    auto r1 = write_shard(tmp, shard_file_name(0, 1), {&part[1]}, {&pm[1]}, {&pv[1]}, meta);
    r0.insert(r0.end(), r1.begin(), r1.end());
    return commit_sharded_checkpoint(dir.string(), step, r0, meta, "dp=1 pp=1 tp=2");
  }
};

bool same(const tensor& a, const tensor& b) {
  return a.shape() == b.shape() && std::memcmp(a.raw(), b.raw(), a.bytes()) == 0;
}

// Writes an edited index with its checksum made anew, as docs/checkpoint-
// format.md defines it: "v1:" and the CRC-32C, 8 hex digits, of the index
// printed with one-space indents without the field.
void write_sealed(const fs::path& path, nlohmann::json j) {
  j.erase("crc32c");
  const std::string text = j.dump(1);
  j["crc32c"] = fmt::format("v1:{:08x}", crc32c(text.data(), text.size()));
  std::ofstream(path) << j.dump(1);
}

}  // namespace

TEST_CASE("slices written by their holders reassemble into the whole tensors", "[checkpoint]") {
  temp_dir d("merak_shard_");
  sample s;
  auto dir = s.save(d.path, 3);
  CHECK(dir == (d.path / "step_00000003").string());
  checkpoint_reader ckpt(d.path.string());  // through latest
  CHECK(ckpt.sharded());
  CHECK(ckpt.dir() == dir);
  CHECK(ckpt.metadata().at("merak.adam_t") == "7");
  CHECK(ckpt.parameters().size() == 2);
  CHECK(same(ckpt.full("w"), s.weight));
  CHECK(same(ckpt.full("m.w"), s.m));
  CHECK(same(ckpt.full("v.w"), s.v));
  CHECK(same(ckpt.full("b"), s.bias));
  CHECK(same(ckpt.full("v.b"), s.bv));
  // Loading into another split: 4 row slices (TP 4) takes its own rows.
  parameter q;
  q.spec = {"w", {1, 6}};
  q.spec.shard = {0, 4, 2, 1, {4, 6}};
  q.value = tensor({1, 6});
  load_parameters(ckpt, {&q}, nullptr);
  CHECK(std::memcmp(q.value.raw(), s.weight.f32() + 2 * 6, 6 * sizeof(float)) == 0);
  // And exported in the single-device format, which reads back the same.
  auto out = export_single_device(ckpt, (d.path / "single").string());
  checkpoint_reader single(out);
  CHECK_FALSE(single.sharded());
  CHECK(same(single.full("w"), s.weight));
  CHECK(same(single.full("m.b"), s.bm));
  CHECK(single.metadata().at("merak.step") == "3");
}

TEST_CASE("a sharded checkpoint with a missing or inconsistent piece is named", "[checkpoint]") {
  temp_dir d("merak_shard_bad_");
  sample s;
  auto dir = fs::path(s.save(d.path, 1));
  auto index_path = dir / "index.json";
  nlohmann::json index = nlohmann::json::parse(std::ifstream(index_path));
  auto rewrite = [&](const nlohmann::json& j) { write_sealed(index_path, j); };

  SECTION("a slice the index lacks") {
    auto j = index;
    j["tensors"]["w"]["slices"].erase(1);
    rewrite(j);
    CHECK_THROWS_WITH(checkpoint_reader(dir.string()).full("w"),
                      Catch::Contains("tensor 'w' has 1 of its 2 slices"));
  }
  SECTION("a shard file that is gone") {
    fs::remove(dir / shard_file_name(0, 1));
    CHECK_THROWS_WITH(checkpoint_reader(dir.string()).full("w"),
                      Catch::Contains("shard-s000-t001.safetensors"));
  }
  SECTION("a field of the wrong type") {
    auto j = index;
    j["tensors"]["w"]["slices"][0]["shard"]["parts"] = "two";
    rewrite(j);
    CHECK_THROWS_WITH(checkpoint_reader(dir.string()),
                      Catch::Contains("tensor 'w': field 'parts' has the wrong type"));
  }
  SECTION("a slice file outside the checkpoint") {
    auto j = index;
    j["tensors"]["b"]["slices"][0]["file"] = "../elsewhere.safetensors";
    rewrite(j);
    CHECK_THROWS_WITH(checkpoint_reader(dir.string()),
                      Catch::Contains("is not a file name in the checkpoint directory"));
  }
  SECTION("a split that does not divide the shape") {
    auto j = index;
    j["tensors"]["w"]["slices"][0]["shard"]["parts"] = 3;
    rewrite(j);
    CHECK_THROWS_WITH(checkpoint_reader(dir.string()),
                      Catch::Contains("does not split shape (4, 6)"));
  }
  SECTION("a model of another shape") {
    parameter q;
    q.spec = {"w", {4, 8}};
    q.value = tensor({4, 8});
    CHECK_THROWS_WITH(load_parameters(checkpoint_reader(dir.string()), {&q}, nullptr),
                      Catch::Contains("tensor 'w' is F32 (4, 6) but this model needs F32 (4, 8)"));
  }
}

TEST_CASE("moments saved as element pieces by several replicas reassemble, and gaps are named",
          "[checkpoint]") {
  temp_dir d("merak_shard_pieces_");
  sample s;
  // Values only in the TP shards' files; the moments of each TP slice (12
  // elements) and of the bias (6) in pieces of three replicas' files.
  auto tmp = begin_checkpoint(d.path.string(), 2);
  const metadata_map meta{{"merak.step", "2"}, {"merak.adam_t", "2"}};
  auto records = write_shard(tmp, shard_file_name(0, 0), {&s.part[0], &s.whole_bias}, {}, {}, meta);
  auto r1 = write_shard(tmp, shard_file_name(0, 1), {&s.part[1]}, {}, {}, meta);
  records.insert(records.end(), r1.begin(), r1.end());
  const int64_t cuts[][2] = {{0, 5}, {5, 9}, {9, 12}};  // replica d: elements [cuts[d])
  for (int rep = 0; rep < 3; ++rep)
    for (int k = 0; k < 2; ++k) {  // TP shard k of replica rep
      const auto [b, e] = std::pair{cuts[rep][0], cuts[rep][1]};
      std::vector<moment_piece> pieces{
          {&s.part[k].spec, b, e, s.pm[k].f32() + b, s.pv[k].f32() + b}};
      const int64_t bb = 2 * rep, be = 2 * rep + 2;  // the bias (TP shard 0's): 2 elements each
      if (k == 0) pieces.push_back({&s.whole_bias.spec, bb, be, s.bm.f32() + bb, s.bv.f32() + bb});
      auto mine = write_moment_pieces(tmp, moment_file_name(0, k, rep), pieces, meta);
      records.insert(records.end(), mine.begin(), mine.end());
    }
  auto dir = fs::path(commit_sharded_checkpoint(d.path.string(), 2, records, meta, "dp=3 tp=2"));
  {
    checkpoint_reader ckpt(dir.string());
    CHECK(same(ckpt.full("w"), s.weight));
    CHECK(same(ckpt.full("m.w"), s.m));
    CHECK(same(ckpt.full("v.w"), s.v));
    CHECK(same(ckpt.full("m.b"), s.bm));
    CHECK(same(ckpt.full("v.b"), s.bv));
    CHECK(ckpt.parameters().size() == 2);
    auto out = export_single_device(ckpt, (d.path / "single").string());
    CHECK(same(checkpoint_reader(out).full("v.w"), s.v));
  }
  auto index_path = dir / "index.json";
  nlohmann::json index = nlohmann::json::parse(std::ifstream(index_path));
  REQUIRE(index["tensors"]["w"]["moments"].size() == 6);
  // Two pieces of one name and start in one file would be ambiguous.
  CHECK_THROWS_WITH(write_moment_pieces(d.path.string(), "twice.safetensors",
                                        {{&s.part[0].spec, 0, 2, s.pm[0].f32(), s.pv[0].f32()},
                                         {&s.part[1].spec, 0, 2, s.pm[1].f32(), s.pv[1].f32()}},
                                        {}),
                    Catch::Contains("'m.w@0' twice"));
  auto rewrite = [&](const nlohmann::json& j) { write_sealed(index_path, j); };
  SECTION("a piece the index lacks") {
    auto j = index;
    j["tensors"]["w"]["moments"].erase(2);
    rewrite(j);
    CHECK_THROWS_WITH(checkpoint_reader(dir.string()),
                      Catch::Contains("the moments of 'w' (part") &&
                          Catch::Contains("after"));
  }
  SECTION("pieces that overlap") {
    auto j = index;
    j["tensors"]["b"]["moments"][1]["elements"] = {1, 4};
    rewrite(j);
    CHECK_THROWS_WITH(checkpoint_reader(dir.string()),
                      Catch::Contains("the moments of 'b' (part 0) have elements [1, 4) after 2"));
  }
  SECTION("a piece that stops short") {
    auto j = index;
    for (auto& p : j["tensors"]["b"]["moments"])
      if (p["elements"][0] == 4) p["elements"] = {4, 5};
    rewrite(j);
    CHECK_THROWS_WITH(checkpoint_reader(dir.string()),
                      Catch::Contains("the moments of 'b' (part 0) cover 5 of its 6 elements"));
  }
  SECTION("a piece whose file holds other elements") {
    auto j = index;
    for (auto& p : j["tensors"]["b"]["moments"])
      if (p["elements"][0] == 0) p["file"] = moment_file_name(0, 0, 1);
    rewrite(j);
    CHECK_THROWS_WITH(checkpoint_reader(dir.string()).full("m.b"),
                      Catch::Contains("shard-s000-t000-d001.safetensors") &&
                          Catch::Contains("does not hold 'm.b@0', which its index places there"));
  }
}

TEST_CASE("values saved as element pieces with their moments reassemble, and mixed places are named",
          "[checkpoint]") {
  temp_dir d("merak_value_pieces_");
  sample s;
  // Parameter shards: no file holds whole values; each replica's file holds
  // its elements' values and moments.
  auto tmp = begin_checkpoint(d.path.string(), 3);
  const metadata_map meta{{"merak.step", "3"}, {"merak.adam_t", "3"}};
  std::vector<shard_record> records;
  const int64_t cuts[][2] = {{0, 7}, {7, 12}};
  for (int rep = 0; rep < 2; ++rep)
    for (int k = 0; k < 2; ++k) {
      const auto [b, e] = std::pair{cuts[rep][0], cuts[rep][1]};
      std::vector<moment_piece> pieces{{&s.part[k].spec, b, e, s.pm[k].f32() + b,
                                        s.pv[k].f32() + b, s.part[k].value.f32() + b}};
      const int64_t bb = 3 * rep, be = 3 * rep + 3;
      if (k == 0)
        pieces.push_back({&s.whole_bias.spec, bb, be, s.bm.f32() + bb, s.bv.f32() + bb,
                          s.whole_bias.value.f32() + bb});
      auto mine = write_moment_pieces(tmp, moment_file_name(0, k, rep), pieces, meta);
      records.insert(records.end(), mine.begin(), mine.end());
    }
  // A piece of the bias without its values beside pieces with them.
  {
    auto mixed = records;
    for (auto& r : mixed)
      if (r.name == "b" && r.begin == 0) r.with_values = false;
    CHECK_THROWS_WITH(commit_sharded_checkpoint(d.path.string(), 3, mixed, meta, "dp=2 tp=2"),
                      Catch::Contains("tensor 'b' has its values in 1 of its 2 moment pieces"));
  }
  auto dir = fs::path(commit_sharded_checkpoint(d.path.string(), 3, records, meta, "dp=2 tp=2"));
  {
    checkpoint_reader ckpt(dir.string());
    CHECK(same(ckpt.full("w"), s.weight));
    CHECK(same(ckpt.full("b"), s.bias));
    CHECK(same(ckpt.full("m.w"), s.m));
    CHECK(same(ckpt.full("v.b"), s.bv));
    CHECK(ckpt.parameters().size() == 2);
    for (auto& r : ckpt.records()) CHECK((r.moment_piece && r.with_values));
    // The holders' parts load into a layout of other TP slices.
    parameter whole_w;
    whole_w.spec = {"w", {4, 6}};
    whole_w.value = tensor({4, 6});
    read_holder_part(ckpt, "w", whole_w.spec, whole_w.value);
    CHECK(same(whole_w.value, s.weight));
    auto out = export_single_device(ckpt, (d.path / "single").string());
    CHECK(same(checkpoint_reader(out).full("w"), s.weight));
  }
  auto index_path = dir / "index.json";
  nlohmann::json index = nlohmann::json::parse(std::ifstream(index_path));
  REQUIRE(index["tensors"]["w"]["slices"].empty());
  SECTION("an index that drops a piece's values") {
    auto j = index;
    j["tensors"]["w"]["moments"][0].erase("values");
    write_sealed(index_path, j);
    CHECK_THROWS_WITH(checkpoint_reader(dir.string()),
                      Catch::Contains("tensor 'w' has its values in 3 of its 4 moment pieces"));
  }
  SECTION("an index whose tensor has neither slices nor value pieces") {
    auto j = index;
    for (auto& p : j["tensors"]["b"]["moments"]) p.erase("values");
    write_sealed(index_path, j);
    CHECK_THROWS_WITH(checkpoint_reader(dir.string()), Catch::Contains("no slice of tensor 'b'"));
  }
}

TEST_CASE("re-saving a step keeps a checkpoint that latest can reach at every point",
          "[checkpoint]") {
  temp_dir d("merak_shard_again_");
  sample s;
  s.save(d.path, 2);
  // A save of the same step interrupted after moving the old one aside:
  // step_00000002 is gone, step_00000002.old and latest remain.
  fs::rename(d.path / "step_00000002", d.path / "step_00000002.old");
  checkpoint_reader aside(d.path.string());
  CHECK(aside.dir() == (d.path / "step_00000002.old").string());
  CHECK(same(aside.full("w"), s.weight));
  // A complete re-save publishes the new one and drops the old.
  s.save(d.path, 2);
  CHECK(checkpoint_reader(d.path.string()).dir() == (d.path / "step_00000002").string());
  CHECK_FALSE(fs::exists(d.path / "step_00000002.old"));
}

TEST_CASE("a sharded checkpoint whose index or shards were edited or mixed is refused by name",
          "[checkpoint]") {
  temp_dir d("merak_shard_trust_");
  sample s;
  auto dir = fs::path(s.save(d.path, 4));
  auto index_path = dir / "index.json";
  const nlohmann::json index = nlohmann::json::parse(std::ifstream(index_path));
  REQUIRE(index.contains("crc32c"));
  SECTION("an index edited without its checksum") {
    auto j = index;
    j["metadata"]["merak.step"] = "1000";
    std::ofstream(index_path) << j.dump(1);
    CHECK_THROWS_WITH(checkpoint_reader(dir.string()),
                      Catch::Contains("index.json: checksum") &&
                          Catch::Contains("does not match its contents"));
    set_verify_checksums(false);  // --skip-checksum: the shards still disagree
    CHECK_THROWS_WITH(checkpoint_reader(dir.string()).full("w"),
                      Catch::Contains("has merak.step '4' but its index has '1000'"));
    set_verify_checksums(true);
  }
  SECTION("an index without a checksum") {
    auto j = index;
    j.erase("crc32c");
    std::ofstream(index_path) << j.dump(1);
    CHECK_THROWS_WITH(checkpoint_reader(dir.string()), Catch::Contains("no checksum"));
  }
  SECTION("a resealed index whose AdamW count the shards do not share") {
    auto j = index;
    j["metadata"]["merak.adam_t"] = "1";
    write_sealed(index_path, j);
    CHECK_THROWS_WITH(checkpoint_reader(dir.string()).full("b"),
                      Catch::Contains("shard-s000-t000.safetensors' has merak.adam_t '7'"));
  }
  SECTION("slices swapped between files") {
    auto j = index;
    auto& slices = j["tensors"]["w"]["slices"];
    std::swap(slices[0]["shard"]["index"], slices[1]["shard"]["index"]);
    write_sealed(index_path, j);
    CHECK_THROWS_WITH(checkpoint_reader(dir.string()).full("w"),
                      Catch::Contains("holds 'w' as") && Catch::Contains("but its index says"));
  }
  SECTION("a stale shard of another step copied in") {
    sample older;
    auto old_dir = fs::path(older.save(d.path / "old", 2));
    fs::copy_file(old_dir / shard_file_name(0, 1), dir / shard_file_name(0, 1),
                  fs::copy_options::overwrite_existing);
    CHECK_THROWS_WITH(checkpoint_reader(dir.string()).full("w"),
                      Catch::Contains("shard-s000-t001.safetensors' has merak.step '2' but its "
                                      "index has '4'"));
  }
}
