// train_gpt: a program that uses merak as a library (find_package(merak)).
//
// It writes its model as it would for one device, with merak's layer API (a
// GPT whose blocks run attention and the MLP side by side, GPT-J style, which
// is not merak's built-in GPT-2), hands merak a device count, and trains: the
// planner chooses data x tensor x pipeline parallelism, micro-batches,
// schedule and recomputation for that many actor "devices" on this machine,
// and the actor runtime runs the plan.
//
// Usage: train_gpt CORPUS.txt [DEVICES] [STEPS]

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include "actors/auto_plan.hpp"
#include "actors/parallel_trainer.hpp"
#include "core/log.hpp"
#include "model/gpt.hpp"
#include "model/layers.hpp"
#include "model/trainer.hpp"

namespace {

int positive_arg(int argc, char** argv, int i, int fallback) {
  if (argc <= i) return fallback;
  char* end = nullptr;
  long v = std::strtol(argv[i], &end, 10);
  if (*end != '\0' || v < 1) {
    std::fprintf(stderr, "train_gpt: error: '%s' is not a positive integer\n", argv[i]);
    std::exit(1);
  }
  return int(v);
}

// The model, for one device: x + attention(ln(x)) + mlp(ln(x)) per block.
// Linear layers say how they may be split for tensor parallelism; merak finds
// the column-then-row pairs, cuts the blocks into pipeline stages and
// schedules them. Inputs "tokens" and "targets" and a loss are what training
// needs.
merak::model::graph parallel_block_gpt(const merak::model::gpt_config& c) {
  namespace ly = merak::model::layers;
  using merak::model::tp_split;
  merak::model::graph g;
  g.set_activation_type(c.activations);  // f32, or bf16 under --precision bf16
  const int tokens = g.add_input("tokens", {}, merak::model::dtype::i32);
  const int targets = g.add_input("targets", {}, merak::model::dtype::i32);
  int x = ly::embedding(g, "embed", tokens, c.vocab, c.max_seq, c.dim);
  for (int l = 0; l < c.layers; ++l) {
    const std::string p = "block" + std::to_string(l) + ".";
    const int h = ly::layernorm(g, p + "ln", x, c.dim);
    int a = ly::linear(g, p + "attn.qkv", h, c.dim, 3 * c.dim, tp_split::column);
    a = ly::causal_attention(g, p + "attn.core", a, c.dim, c.heads, c.max_seq);
    a = ly::linear(g, p + "attn.proj", a, c.dim, c.dim, tp_split::row);
    int m = ly::linear(g, p + "mlp.fc", h, c.dim, 4 * c.dim, tp_split::column);
    m = ly::gelu(g, p + "mlp.gelu", m, 4 * c.dim);
    m = ly::linear(g, p + "mlp.proj", m, 4 * c.dim, c.dim, tp_split::row);
    x = ly::residual(g, p + "res.attn", x, a, c.dim);
    x = ly::residual(g, p + "res.mlp", x, m, c.dim);
  }
  x = ly::layernorm(g, "ln_f", x, c.dim);
  const int logits = ly::lm_head(g, "lm_head", x, c.dim, c.vocab, "wte");
  g.set_loss(ly::cross_entropy(g, "loss", logits, targets, c.vocab));
  return g;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || argc > 4) {
    std::fprintf(stderr, "usage: %s CORPUS.txt [DEVICES] [STEPS]\n", argv[0]);
    return 2;
  }
  const int devices = positive_arg(argc, argv, 2, 4);
  const int steps = positive_arg(argc, argv, 3, 20);
  namespace ma = merak::actors;
  namespace mm = merak::model;
  try {
    merak::setup_logging("warn");

    // 1. The model and its training, written for one device.
    mm::train_options opts;
    opts.data = argv[1];  // any text file: byte-level tokens
    opts.model = {.vocab = 256, .max_seq = 32, .layers = 4, .dim = 64, .heads = 4};
    opts.model.build = parallel_block_gpt;
    opts.batch = 16;  // the global batch of a step
    opts.steps = steps;
    opts.lr = 1e-3f;
    const mm::graph g = mm::build_model(opts.model);  // the model graph the planner cuts
    std::printf("model %s: %lld parameters, %zu graph nodes\n", opts.model.str().c_str(),
                static_cast<long long>(g.parameter_count()), g.nodes().size());

    // 2. One call: the parallel plan for this many devices.
    const ma::device_plan plan = ma::plan_for_devices(opts, devices);
    std::printf("plan for %d devices: %s\n", devices, plan.search.best.str().c_str());

    // 3. Train it on the actor runtime.
    ma::parallel_trainer trainer(opts, plan.options);
    while (!trainer.done()) {
      const mm::step_result r = trainer.train_step();
      std::printf("step %lld/%d loss %.4f\n", static_cast<long long>(r.step), steps, r.loss);
    }
    std::printf("validation loss %.4f\n", trainer.validation_loss());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_gpt: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
