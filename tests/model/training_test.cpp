// End-to-end training of tiny models: learning, and exact resumption.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <filesystem>

#include "core/rng.hpp"
#include "model/checkpoint.hpp"
#include "model/trainer.hpp"
#include "tests/model/test_util.hpp"

using namespace merak;
using namespace merak::model;
namespace fs = std::filesystem;

namespace {

train_options tiny_options(int64_t steps) {
  train_options o;
  o.model = {.vocab = 256, .max_seq = 16, .layers = 2, .dim = 32, .heads = 4};
  o.batch = 4;
  o.steps = steps;
  o.lr = 3e-3f;
  o.warmup = 5;
  o.seed = 7;
  return o;
}

text_corpus tiny_corpus(size_t bytes = 2000) {
  return text_corpus(test::small_text(bytes), 16, 0.1, "tiny");
}

fs::path fresh_dir(const std::string& name) {
  auto d = fs::temp_directory_path() / ("merak_test_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  return d;
}

}  // namespace

TEST_CASE("a tiny GPT overfits a short text", "[train]") {
  auto opts = tiny_options(300);
  opts.model.dim = 64;
  opts.batch = 8;
  trainer tr(opts, tiny_corpus(600));
  double first = tr.train_step().loss;
  double last = first;
  while (!tr.done()) last = tr.train_step().loss;
  INFO("first loss " << first << ", last " << last);
  CHECK(first > 4.5);          // about log(256) at initialisation
  CHECK(last < 0.15 * first);  // it has learnt the text (about 0.3 after 300 steps)
  CHECK(tr.validation_loss() < first);
}

TEST_CASE("a tiny Llama learns a short text", "[train][llama]") {
  auto opts = tiny_options(200);
  opts.model.family = model_family::llama;
  opts.model.query_groups = 2;
  opts.model.ffn_hidden = 64;
  opts.batch = 8;
  trainer tr(opts, tiny_corpus(600));
  double first = tr.train_step().loss;
  double last = first;
  while (!tr.done()) last = tr.train_step().loss;
  INFO("first loss " << first << ", last " << last);
  CHECK(first > 4.5);          // about log(256) at initialisation
  CHECK(last < 0.35 * first);  // it has learnt the text
  CHECK(tr.validation_loss() < first);
}

TEST_CASE("a resumed run is bit-for-bit the uninterrupted run", "[train][checkpoint]") {
  auto dir = fresh_dir("resume");
  auto opts = tiny_options(8);
  opts.model.activations = GENERATE(dtype::f32, dtype::bf16);
  INFO("precision " << precision_name(opts.model.activations));
  opts.save_dir = dir.string();
  opts.save_interval = 3;

  std::vector<double> full_losses;
  std::vector<std::vector<float>> full_params;
  {
    trainer tr(opts, tiny_corpus());
    while (!tr.done()) {
      full_losses.push_back(tr.train_step().loss);
      if (tr.checkpoint_due()) tr.save();
    }
    for (auto& p : tr.parameters().all())
      full_params.emplace_back(p->value.f32(), p->value.f32() + p->value.numel());
  }
  REQUIRE(fs::exists(dir / "step_00000003" / "model.safetensors"));
  REQUIRE(fs::exists(dir / "step_00000006" / "optimizer.safetensors"));
  REQUIRE(fs::exists(dir / "step_00000008"));
  CHECK(resolve_checkpoint(dir.string()) == (dir / "step_00000008").string());

  auto resumed = opts;
  resumed.save_dir.clear();
  resumed.save_interval = 0;
  resumed.load = (dir / "step_00000003").string();
  trainer tr(resumed, tiny_corpus());
  CHECK(tr.step() == 3);
  std::vector<double> losses;
  while (!tr.done()) losses.push_back(tr.train_step().loss);
  REQUIRE(losses.size() == 5);
  for (size_t i = 0; i < losses.size(); ++i) CHECK(losses[i] == full_losses[3 + i]);
  size_t k = 0;
  for (auto& p : tr.parameters().all()) {
    INFO(p->spec.name);
    CHECK(std::memcmp(p->value.f32(), full_params[k].data(), p->value.bytes()) == 0);
    ++k;
  }
  fs::remove_all(dir);
}

// Text that cannot be memorised: words drawn at random (a fixed seed) from
// a small vocabulary, so the validation loss settles at the text's entropy
// (as on a real corpus) instead of falling towards zero.
std::vector<uint8_t> random_words(size_t bytes, uint64_t seed) {
  static const char* words[] = {"the",   "whale", "sea",  "ship", "captain", "and", "of",
                                "white", "boat",  "deep", "sail", "harpoon", "a",   "to",
                                "in",    "wind",  "crew", "old",  "storm",   "his"};
  rng r(seed, 5);
  std::vector<uint8_t> out;
  while (out.size() < bytes) {
    const char* w = words[r.below(std::size(words))];
    out.insert(out.end(), w, w + std::strlen(w));
    out.push_back(r.below(8) == 0 ? '\n' : ' ');
  }
  out.resize(bytes);
  return out;
}

TEST_CASE("bf16 training ends within 1% of the float run's validation loss", "[train][bf16]") {
  // 300 steps, once per precision, from the same initial weights and batches.
  auto run = [](dtype activations) {
    auto opts = tiny_options(300);
    opts.model.dim = 64;
    opts.batch = 8;
    opts.model.activations = activations;
    trainer tr(opts, text_corpus(random_words(20000, 3), 16, 0.1, "words"));
    double first = tr.train_step().loss;
    while (!tr.done()) tr.train_step();
    return std::pair{first, tr.validation_loss()};
  };
  auto [first32, val32] = run(dtype::f32);
  auto [first16, val16] = run(dtype::bf16);
  INFO("validation loss fp32 " << val32 << ", bf16 " << val16 << " (first losses " << first32
                               << ", " << first16 << ")");
  CHECK(val16 < 0.5 * first16);  // it learnt
  CHECK(std::abs(val16 - val32) <= 0.01 * val32);
}

TEST_CASE("runs resume across precisions: checkpoints hold float weights", "[train][bf16]") {
  auto dir = fresh_dir("precision");
  for (dtype saved : {dtype::f32, dtype::bf16}) {
    const dtype other = saved == dtype::f32 ? dtype::bf16 : dtype::f32;
    INFO("saved in " << precision_name(saved) << ", resumed in " << precision_name(other));
    fs::remove_all(dir);
    auto opts = tiny_options(6);
    opts.model.activations = saved;
    opts.save_dir = dir.string();
    opts.save_interval = 3;
    std::vector<double> full;
    {
      trainer tr(opts, tiny_corpus());
      while (!tr.done()) {
        full.push_back(tr.train_step().loss);
        if (tr.checkpoint_due()) tr.save();
      }
    }
    auto resumed = opts;
    resumed.model.activations = other;
    resumed.save_dir.clear();
    resumed.save_interval = 0;
    resumed.load = (dir / "step_00000003").string();
    trainer tr(resumed, tiny_corpus());
    REQUIRE(tr.step() == 3);
    for (int i = 3; i < 6; ++i) {
      double loss = tr.train_step().loss;
      INFO("step " << i + 1 << ": " << loss << " resumed, " << full[size_t(i)] << " uninterrupted");
      // The same weights, optimizer state and batches; only the precision of
      // the activations differs.
      CHECK(std::abs(loss - full[size_t(i)]) < 0.01 * full[size_t(i)]);
    }
  }
  fs::remove_all(dir);
}

TEST_CASE("a checkpoint of another model shape is refused", "[checkpoint]") {
  auto dir = fresh_dir("shape");
  auto opts = tiny_options(1);
  opts.save_dir = dir.string();
  {
    trainer tr(opts, tiny_corpus());
    tr.train_step();
    tr.save();
  }
  auto other = tiny_options(2);
  other.model.dim = 16;
  other.load = dir.string();
  CHECK_THROWS_WITH(trainer(other, tiny_corpus()),
                    Catch::Contains("holds model") && Catch::Contains("\"dim\":32"));
  fs::remove_all(dir);
}

TEST_CASE("the learning rate warms up linearly, then decays as Megatron-LM's styles say",
          "[training][lr]") {
  // Megatron-LM's OptimizerParamScheduler, written from its definition: its
  // iteration k + 1 runs at the rate of k finished steps, so step k
  // (0-based) warms up as init + (max - init) k / w for k <= w; then, with
  // r = (k - w) / (D - w) of the decay span D, cosine min + (max - min)(1 +
  // cos(pi r)) / 2, linear min + (max - min)(1 - r), constant max; min from
  // D on.
  lr_schedule s{
      .max_lr = 1.0f, .min_lr = 0.1f, .warmup_steps = 4, .warmup_init = 0.2f, .total_steps = 14};
  auto decayed = [](double r, lr_decay style) {
    const double c = style == lr_decay::cosine ? 0.5 * (1 + std::cos(M_PI * r)) : 1 - r;
    return 0.1 + 0.9 * c;
  };
  for (auto style : {lr_decay::cosine, lr_decay::linear, lr_decay::constant}) {
    s.style = style;
    for (int64_t k = 0; k < 20; ++k) {
      INFO("style " << int(style) << " step " << k);
      double want = k <= 4 ? 0.2 + 0.8 * k / 4.0
                    : style == lr_decay::constant ? 1.0
                    : k >= 14 ? 0.1
                              : decayed((k - 4) / 10.0, style);
      CHECK(s.at(k) == Approx(want).epsilon(1e-6));
    }
  }
  // Megatron's default --lr-warmup-init 0: the first step of a warm-up
  // leaves the weights as they are.
  s.warmup_init = 0;
  CHECK(s.at(0) == 0.0f);
  CHECK(s.at(2) == Approx(0.5).epsilon(1e-6));
  // The options: --lr-decay-iters ends the decay before the run does.
  train_options o = tiny_options(30);
  o.decay = lr_decay::linear;
  o.decay_steps = 20;
  const lr_schedule from = o.schedule();
  CHECK(from.total_steps == 20);
  CHECK(from.style == lr_decay::linear);
  CHECK(from.at(25) == Approx(o.lr / 10));
  CHECK(parse_lr_decay("constant") == lr_decay::constant);
  CHECK_THROWS_WITH(parse_lr_decay("exponential"), Catch::Contains("--lr-decay-style") &&
                                                      Catch::Contains("exponential"));
  o.warmup_init = -1e-3f;
  CHECK_THROWS_WITH(o.validate(), Catch::Contains("--lr-warmup-init"));
  o.warmup_init = 0;
  o.adam_beta2 = 1.0f;
  CHECK_THROWS_WITH(o.validate(), Catch::Contains("--adam-beta2"));
}
