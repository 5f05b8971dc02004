// `merak ckpt`: inspect a checkpoint of either format, and export any
// (sharded, any layout) as a single-device checkpoint that PyTorch-side
// tools load (docs/checkpoint-format.md).
//
//   merak ckpt inspect PATH        JSON summary on stdout
//   merak ckpt export PATH OUT     OUT/step_XXXXXXXX/{model,optimizer}.safetensors
#include <CLI/CLI.hpp>

#include <cstdio>
#include <memory>
#include <set>

#include <nlohmann/json.hpp>

#include "apps/commands.hpp"
#include "model/sharded_checkpoint.hpp"

namespace merak::apps {

action add_ckpt_command(CLI::App& parent) {
  struct flags {
    std::string path, out;
  };
  auto f = std::make_shared<flags>();
  auto* c = parent.add_subcommand(
      "ckpt", "Inspect a checkpoint, or export a sharded one in the single-device format");
  c->require_subcommand(1);
  auto* inspect =
      c->add_subcommand("inspect", "Print a checkpoint's step, layout and tensors as JSON");
  inspect->add_option("path", f->path, "A run directory (its latest) or a checkpoint directory")
      ->required();
  auto* exp = c->add_subcommand(
      "export", "Write a checkpoint (any layout) as a single-device checkpoint under OUT");
  exp->add_option("path", f->path, "A run directory (its latest) or a checkpoint directory")
      ->required();
  exp->add_option("out", f->out, "Run directory to write (created; its latest moves to it)")
      ->required();
  return [f, inspect, exp] {
    model::checkpoint_reader ckpt(f->path);
    if (exp->parsed()) {
      std::printf("%s\n", model::export_single_device(ckpt, f->out).c_str());
      return 0;
    }
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
  };
}

}  // namespace merak::apps
