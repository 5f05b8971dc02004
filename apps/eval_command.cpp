// `merak eval --load CKPT --data FILE | --data-path P`: the validation loss of a checkpoint
// on one device, on the fixed validation windows `merak train` reports its
// val_loss on (model/data.hpp): the last --val-fraction of FILE, --batch
// evenly spaced windows of the checkpoint's sequence length per batch,
// --eval-batches batches, the mean per-token cross-entropy over them (with
// --data-path: the valid split's batches, docs/datasets.md). The
// model's shape and tokenizer come from the checkpoint's metadata.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <memory>

#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "apps/commands.hpp"
#include "core/error.hpp"
#include "model/gemm.hpp"
#include "model/model_metadata.hpp"
#include "model/sharded_checkpoint.hpp"
#include "model/trainer.hpp"

namespace merak::apps {

action add_eval_command(CLI::App& parent) {
  struct flags {
    model::train_options opts;
    bool json = false;
    int threads = 0;
  };
  auto f = std::make_shared<flags>();
  auto* c = parent.add_subcommand(
      "eval", "Print a checkpoint's validation loss on a text file (the windows train reports)");
  c->add_option("--load", f->opts.load, "A run directory (its latest) or a checkpoint directory")
      ->required();
  auto* data =
      c->add_option("--data", f->opts.data, "The text file; its last --val-fraction validates");
  c->add_option("--data-path", f->opts.data_path,
                "Tokenized datasets instead of --data (as merak train's): their valid split "
                "validates")
      ->expected(1, -1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
      ->excludes(data);
  c->add_option("--split", f->opts.split, "--data-path: train,valid,test shares of the documents")
      ->capture_default_str();
  c->add_option("--batch", f->opts.batch, "Windows per validation batch")->capture_default_str();
  c->add_option("--eval-batches", f->opts.eval_batches, "Validation batches")
      ->capture_default_str();
  c->add_option("--val-fraction", f->opts.val_fraction, "Share of the file that validates")
      ->capture_default_str();
  c->add_option("--threads", f->threads, "Compute threads (default: all cores)")
      ->check(CLI::Range(0, 4096));
  c->add_flag("--json", f->json, "Print one JSON object instead of a line of text");
  return [f] {
    if (f->threads > 0) model::set_compute_threads(f->threads);
    model::train_options opts = f->opts;
    const model::checkpoint_reader ckpt(opts.load);
    auto meta = ckpt.metadata();
    if (!meta.count("merak.model"))
      fail("checkpoint '{}': metadata merak.model is missing", ckpt.dir());
    opts.model = model::parse_model_metadata(meta["merak.model"],
                                             fmt::format("checkpoint '{}'", ckpt.dir()));
    opts.tokens =
        model::parse_tokenizer(meta.count("merak.tokenizer") ? meta["merak.tokenizer"] : "bytes");
    opts.steps = 0;
    opts.load = ckpt.dir();
    model::trainer tr(opts);
    const double loss = tr.validation_loss();
    if (f->json)
      std::printf("%s\n",
                  nlohmann::json{
                      {"checkpoint", ckpt.dir()},
                      {"data", opts.data.empty() ? fmt::format("{}", fmt::join(opts.data_path, " "))
                                                 : opts.data},
                      {"model", opts.model.str()},
                      {"val_loss", loss}}
                      .dump()
                      .c_str());
    else
      std::printf("val_loss %.9g\n", loss);
    return 0;
  };
}

}  // namespace merak::apps
