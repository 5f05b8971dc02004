// `merak ckpt`: inspect a checkpoint of either format, export any (sharded,
// any layout) as a single-device checkpoint that PyTorch-side tools load
// (docs/checkpoint-format.md), and convert to and from Hugging Face's
// GPT2LMHeadModel and LlamaForCausalLM (docs/hf-checkpoints.md).
//
//   merak ckpt inspect PATH            JSON summary on stdout
//   merak ckpt export PATH OUT         OUT/step_XXXXXXXX/{model,optimizer}.safetensors
//   merak ckpt export --hf OUT PATH    OUT/config.json, OUT/model*.safetensors
//   merak ckpt import --hf DIR --out OUT
//                                      OUT/step_00000000/, which `merak train --load` resumes
#include <CLI/CLI.hpp>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <set>

#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "apps/commands.hpp"
#include "core/error.hpp"
#include "model/graph.hpp"
#include "model/hf_checkpoint.hpp"
#include "model/llama.hpp"
#include "model/model_metadata.hpp"
#include "model/sharded_checkpoint.hpp"
#include "model/trainer.hpp"

namespace merak::apps {
namespace {

namespace fs = std::filesystem;

struct ckpt_flags {
  std::string path, out, hf;
  // import
  int seq = 0;  // Llama: the training sequence length; 0: max_position_embeddings
  std::string tokenizer = "bytes";
  uint64_t seed = model::train_options{}.seed;
  // export --hf
  std::string dtype = "fp32";
  uint64_t max_shard_bytes = model::hf_write_options{}.max_shard_bytes;
  bool overwrite = false;  // export OUT, import --out: replace the run it holds
};

// The parameters build_model gives `config`, each once, in graph order.
std::vector<model::param_spec> graph_parameters(const model::gpt_config& config) {
  model::graph g = model::build_model(config);
  std::vector<model::param_spec> out;
  std::set<std::string> seen;
  for (auto& node : g.nodes())
    for (auto& p : node.params)
      if (seen.insert(p.name).second) out.push_back(p);
  return out;
}

// The `merak train` flags of `m`'s shape (what --load then expects).
std::string model_flags(const model::gpt_config& m, model::tokenizer tokens) {
  std::string s = fmt::format("--layers {} --dim {} --heads {} --seq {} --vocab {}", m.layers,
                              m.dim, m.heads, m.max_seq, m.vocab);
  if (m.family == model::model_family::llama)
    s = fmt::format(
        "--model llama {} --num-query-groups {} --ffn-hidden-size {} --rotary-base {} "
        "--norm-epsilon {}",
        s, model::llama_query_groups(m), model::llama_ffn_size(m), m.rotary_base, m.norm_epsilon);
  else if (!m.tied_head)
    s += " --untied-head";
  if (tokens != model::tokenizer::bytes) s += " --tokenizer words";
  return s;
}

// `out` (ckpt export's OUT, ckpt import's --out) becomes a new run: one it
// already holds is refused, or with --overwrite removed, never merged into
// (its latest would go back to the written step). `source`: the checkpoint
// written (export), which --overwrite must not remove.
void claim_output_run(const std::string& what, const std::string& out, bool overwrite,
                      const std::string& source) {
  const std::string held = model::describe_run(out);
  if (held.empty()) return;
  if (!overwrite)
    fail(
        "{} '{}' already holds a run ({}): write into a new directory, or pass --overwrite to "
        "replace that run",
        what, out, held);
  if (!source.empty() && model::part_of_run(source, out))
    fail(
        "{} '{}' holds the checkpoint being exported ('{}'): --overwrite would remove it; "
        "write into a new directory",
        what, out, source);
  model::remove_run(out);
  spdlog::warn("{} '{}': --overwrite removed the run it held ({})", what, out, held);
}

// Writes the Hugging Face checkpoint in f.hf as OUT/step_00000000 (zero
// AdamW moments, step 0) with the metadata a run of its shape records.
int import_hf(const ckpt_flags& f) {
  model::hf_model hf = model::read_hf_checkpoint(f.hf);
  model::train_options opts;
  opts.model = hf.config.model;
  if (f.seq > 0) {
    if (opts.model.family != model::model_family::llama)
      fail("--seq: a GPT-2 model's sequence length is its position table, n_positions ({})",
           opts.model.max_seq);
    opts.model.max_seq = f.seq;
  }
  opts.tokens = model::parse_tokenizer(f.tokenizer);
  opts.seed = f.seed;
  std::vector<std::string> names;
  std::vector<const model::tensor*> values, moments;
  std::vector<model::tensor> zeros;
  const auto params = graph_parameters(opts.model);
  zeros.reserve(params.size());
  for (auto& p : params) {
    auto it = hf.parameters.find(p.name);
    // The mapping tables cover every parameter of the graph: a miss is a bug.
    MERAK_CHECK(it != hf.parameters.end() && it->second.shape() == p.shape,
                "no Hugging Face mapping for parameter {} {}", p.name, model::shape_str(p.shape));
    names.push_back(p.name);
    values.push_back(&it->second);
    zeros.push_back(model::tensor::zeros(p.shape));
    moments.push_back(&zeros.back());
  }
  auto meta = model::checkpoint_metadata(opts, 0, "hf:" + f.hf);
  meta["merak.step"] = "0";
  meta["merak.adam_t"] = "0";
  claim_output_run("--out", f.out, f.overwrite, "");
  const std::string tmp = model::begin_checkpoint(f.out, 0);
  try {
    model::write_single_device_files(tmp, names, values, moments, moments, meta);
    std::printf("%s\n", model::publish_checkpoint(f.out, model::checkpoint_name(0)).c_str());
  } catch (...) {
    model::discard_checkpoint(tmp);
    throw;
  }
  spdlog::info("{} imported; train it with: merak train --load {} {}", hf.config.architecture,
               f.out, model_flags(opts.model, opts.tokens));
  return 0;
}

// Writes checkpoint f.path (any layout) as a Hugging Face checkpoint in f.hf.
int export_hf(const ckpt_flags& f) {
  model::checkpoint_reader ckpt(f.path);
  auto meta = ckpt.metadata();
  if (!meta.count("merak.model"))
    fail("checkpoint '{}': metadata merak.model is missing", ckpt.dir());
  const auto config =
      model::parse_model_metadata(meta["merak.model"], fmt::format("checkpoint '{}'", ckpt.dir()));
  model::hf_write_options options;
  options.type = model::parse_precision(f.dtype);
  options.max_shard_bytes = f.max_shard_bytes;
  std::error_code ec;
  fs::create_directories(f.hf, ec);
  if (ec) fail("--hf '{}': cannot create the directory: {}", f.hf, ec.message());
  if (!fs::is_empty(f.hf, ec))
    fail("--hf '{}' is not empty (a checkpoint is exported into a new directory)", f.hf);
  model::write_hf_checkpoint(
      f.hf, config, [&](const std::string& name) { return ckpt.full(name); }, options);
  std::printf("%s\n", f.hf.c_str());
  return 0;
}

int inspect(const ckpt_flags& f) {
  model::checkpoint_reader ckpt(f.path);
  nlohmann::json params = nlohmann::json::object();
  std::set<std::string> files;
  int64_t elements = 0;
  for (auto& name : ckpt.parameters()) {
    auto t = ckpt.full(name);  // also checks that every slice is there
    params[name] = t.shape();
    elements += t.numel();
  }
  for (auto& r : ckpt.records()) files.insert(r.file);
  nlohmann::json out = {
      {"checkpoint", ckpt.dir()},    {"format", ckpt.sharded() ? "sharded" : "single-device"},
      {"metadata", ckpt.metadata()}, {"parameters", params.size()},
      {"elements", elements},        {"tensors", params}};
  if (ckpt.sharded()) {
    out["layout"] = ckpt.layout();
    out["files"] = files;
  }
  std::printf("%s\n", out.dump(1).c_str());
  return 0;
}

}  // namespace

action add_ckpt_command(CLI::App& parent) {
  auto f = std::make_shared<ckpt_flags>();
  auto* c = parent.add_subcommand(
      "ckpt",
      "Inspect a checkpoint, export it (single-device or Hugging Face), or import a Hugging "
      "Face one");
  c->require_subcommand(1);
  auto* inspect_cmd =
      c->add_subcommand("inspect", "Print a checkpoint's step, layout and tensors as JSON");
  inspect_cmd->add_option("path", f->path, "A run directory (its latest) or a checkpoint directory")
      ->required();
  auto* exp = c->add_subcommand(
      "export",
      "Write a checkpoint (any layout) as a single-device checkpoint under OUT, or with --hf as a "
      "Hugging Face one");
  exp->add_option("path", f->path, "A run directory (its latest) or a checkpoint directory")
      ->required();
  exp->add_option("out", f->out,
                  "New run directory to write (created; one that holds a run is refused)");
  exp->add_flag("--overwrite", f->overwrite,
                "Replace the run OUT holds (its latest, checkpoints and config.toml)");
  exp->add_option("--hf", f->hf,
                  "Write a Hugging Face checkpoint (config.json, model.safetensors) into this new "
                  "directory instead");
  exp->add_option("--dtype", f->dtype, "With --hf: fp32 or bf16 weights")
      ->check(CLI::IsMember({"fp32", "bf16"}));
  exp->add_option("--max-shard-bytes", f->max_shard_bytes,
                  "With --hf: weights above this many bytes are split into shards with an index")
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 50));
  auto* imp = c->add_subcommand(
      "import", "Write a Hugging Face checkpoint as a merak checkpoint that train --load resumes");
  imp->add_option("--hf", f->hf, "Directory with config.json and model.safetensors (or an index)")
      ->required();
  imp->add_option("--out", f->out,
                  "New run directory to write (created; one that holds a run is refused)")
      ->required();
  imp->add_flag("--overwrite", f->overwrite,
                "Replace the run --out holds (its latest, checkpoints and config.toml)");
  imp->add_option("--seq", f->seq,
                  "Llama: the sequence length to train with (default: max_position_embeddings)")
      ->check(CLI::Range(1, 1 << 30));
  imp->add_option("--tokenizer", f->tokenizer, "The tokenizer runs from it use: bytes or words")
      ->check(CLI::IsMember({"bytes", "words"}));
  imp->add_option("--seed", f->seed, "The seed recorded for the data stream of a resumed run");
  return [f, exp, imp] {
    if (imp->parsed()) return import_hf(*f);
    if (!exp->parsed()) return inspect(*f);
    for (const char* flag : {"--dtype", "--max-shard-bytes"})
      if (exp->count(flag) && f->hf.empty()) fail("ckpt export: {} needs --hf", flag);
    if (f->overwrite && !f->hf.empty())
      fail("ckpt export --hf: --overwrite is not taken (the --hf directory must be new or empty)");
    if (!f->hf.empty()) {
      if (!f->out.empty())
        fail("ckpt export --hf OUT PATH takes one checkpoint PATH (got '{}' and '{}')", f->path,
             f->out);
      return export_hf(*f);
    }
    if (f->out.empty()) fail("ckpt export PATH OUT: OUT is missing (or give --hf OUT)");
    const model::checkpoint_reader ckpt(f->path);
    claim_output_run("ckpt export: OUT", f->out, f->overwrite, ckpt.dir());
    std::printf("%s\n", model::export_single_device(ckpt, f->out).c_str());
    return 0;
  };
}

}  // namespace merak::apps
