// The CUDA backend against the CPU backend, operation by operation, forward
// and backward, in float and bf16, on random inputs (gradient outputs start
// random too, so a backward that overwrites instead of accumulating fails).
// Skips (exit 77) without a CUDA device.
//
// Tolerances are normwise relative errors ||gpu - cpu|| / ||cpu||: 1e-5 in
// float with exact float GEMMs (the summation order differs), 2e-3 with TF32
// GEMMs (10-bit mantissas), 1e-2 in bf16 (either side may round an element
// to the neighbouring bf16 value, 2^-8 apart).
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>

#include "actors/parallel_trainer.hpp"
#include "gpu/cuda_backend.hpp"
#include "gpu/device.hpp"
#include "model/backend.hpp"
#include "model/trainer.hpp"
#include "tests/actors/layout_options.hpp"
#include "tests/model/test_util.hpp"

using namespace merak;
using model::dtype;
using model::tensor;

namespace {

const model::device gpu0 = model::device::cuda(0);

model::backend& cpu() {
  return model::backend_for(model::device::cpu());
}
model::backend& dev() {
  return model::backend_for(gpu0);
}

// A host tensor and its copy on the device.
struct both {
  tensor h, d;
};

// Normal(0, scale) values of `type` (bf16: rounded from float).
both random(const model::shape_t& shape, dtype type, uint64_t seed, float scale = 1.0f) {
  tensor f = test::random_tensor(shape, seed, scale);
  tensor h(shape, type);
  cpu().copy(h, f);
  return {std::move(h), {}};
}
both on_device(both x) {
  x.d = x.h.to(gpu0);
  return x;
}
both rnd(const model::shape_t& shape, dtype type, uint64_t seed, float scale = 1.0f) {
  return on_device(random(shape, type, seed, scale));
}
both ids(const model::shape_t& shape, int limit, uint64_t seed) {
  return on_device({test::random_ids(shape, limit, seed), {}});
}
both empty(const model::shape_t& shape, dtype type) {
  return {tensor(shape, type), tensor(shape, type, gpu0)};
}

// ||gpu - cpu|| / ||cpu|| of x within tol.
void expect_close(const both& x, double tol, const char* what) {
  tensor back = x.d.to(model::device::cpu());
  tensor a(x.h.shape()), b(x.h.shape());
  cpu().copy(a, x.h);
  cpu().copy(b, back);
  double num = 0, den = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    const double d = double(b.f32()[i]) - a.f32()[i];
    num += d * d;
    den += double(a.f32()[i]) * a.f32()[i];
  }
  const double err = std::sqrt(num / std::max(den, 1e-30));
  INFO(what << ": normwise error " << err << " (tolerance " << tol << ")");
  CHECK(err <= tol);
}

// The fused attention enabled for one test case, off again at its end
// whatever the case's outcome.
struct fused_attention_on {
  fused_attention_on() { gpu::set_fused_attention(true); }
  ~fused_attention_on() { gpu::set_fused_attention(false); }
};

double tol_of(dtype t) {
  return t == dtype::bf16 ? 1e-2 : 1e-5;
}

}  // namespace

TEST_CASE("every CUDA operation matches the CPU backend, float and bf16", "[gpu][backend]") {
  gpu::set_float_gemm_math(gpu::gemm_math::exact);
  const int B = 2, T = 64, C = 96, NH = 4, V = 101, OC = 160;
  const int64_t N = int64_t(B) * T;
  for (dtype A : {dtype::f32, dtype::bf16}) {
    INFO("activations " << model::dtype_name(A));
    const double tol = tol_of(A);

    auto tokens = ids({B, T}, V, 1);
    auto wte = rnd({V, C}, dtype::f32, 2), wpe = rnd({T, C}, dtype::f32, 3);
    auto enc = empty({B, T, C}, A);
    cpu().encoder_forward(enc.h, tokens.h, wte.h, wpe.h);
    dev().encoder_forward(enc.d, tokens.d, wte.d, wpe.d);
    expect_close(enc, tol, "encoder forward");
    auto g = rnd({B, T, C}, A, 4);
    auto dwte = rnd({V, C}, dtype::f32, 5), dwpe = rnd({T, C}, dtype::f32, 6);
    cpu().encoder_backward(dwte.h, dwpe.h, g.h, tokens.h);
    dev().encoder_backward(dwte.d, dwpe.d, g.d, tokens.d);
    expect_close(dwte, tol, "encoder backward: dwte");
    expect_close(dwpe, tol, "encoder backward: dwpe");

    auto x = rnd({B, T, C}, A, 7);
    auto w = rnd({C}, dtype::f32, 8), bias = rnd({C}, dtype::f32, 9);
    auto ln = empty({B, T, C}, A), mean = empty({N}, dtype::f32), rstd = empty({N}, dtype::f32);
    cpu().layernorm_forward(ln.h, mean.h, rstd.h, x.h, w.h, bias.h);
    dev().layernorm_forward(ln.d, mean.d, rstd.d, x.d, w.d, bias.d);
    expect_close(ln, tol, "layernorm forward");
    expect_close(mean, tol, "layernorm mean");
    expect_close(rstd, tol, "layernorm rstd");
    auto dx = rnd({B, T, C}, A, 10), dw = rnd({C}, dtype::f32, 11), db = rnd({C}, dtype::f32, 12);
    cpu().layernorm_backward(dx.h, dw.h, db.h, g.h, x.h, w.h, mean.h, rstd.h);
    dev().layernorm_backward(dx.d, dw.d, db.d, g.d, x.d, w.d, mean.h.to(gpu0), rstd.h.to(gpu0));
    expect_close(dx, tol, "layernorm backward: din");
    expect_close(dw, tol, "layernorm backward: dweight");
    expect_close(db, tol, "layernorm backward: dbias");

    // Linear: the GEMM weight has the activations' type; N, C, OC not
    // multiples of 8 somewhere, so no algorithm may assume alignment of rows.
    for (int oc : {OC, 37}) {
      auto wl = rnd({oc, C}, A, 13, 0.1f);
      auto bl = rnd({oc}, dtype::f32, 14);
      auto y = empty({B, T, oc}, A);
      cpu().matmul_forward(y.h, x.h, wl.h, &bl.h);
      dev().matmul_forward(y.d, x.d, wl.d, &bl.d);
      expect_close(y, tol, "matmul forward");
      auto gy = rnd({B, T, oc}, A, 15);
      auto din = rnd({B, T, C}, A, 16), dwl = rnd({oc, C}, dtype::f32, 17),
           dbl = rnd({oc}, dtype::f32, 18);
      cpu().matmul_backward(&din.h, &dwl.h, &dbl.h, gy.h, x.h, wl.h);
      dev().matmul_backward(&din.d, &dwl.d, &dbl.d, gy.d, x.d, wl.d);
      expect_close(din, tol, "matmul backward: din");
      expect_close(dwl, tol, "matmul backward: dweight");
      expect_close(dbl, tol, "matmul backward: dbias");
    }

    auto qkv = rnd({B, T, 3 * C}, A, 19);
    auto out = empty({B, T, C}, A), att = empty({B, NH, T, T}, A);
    cpu().attention_forward(out.h, att.h, qkv.h, NH);
    dev().attention_forward(out.d, att.d, qkv.d, NH);
    expect_close(out, tol, "attention forward");
    auto dqkv = rnd({B, T, 3 * C}, A, 20);
    // Both sides read the CPU's probabilities (the entries above the
    // diagonal are unwritten on either).
    auto att_h = both{att.h.clone(), att.h.to(gpu0)};
    cpu().attention_backward(dqkv.h, g.h, qkv.h, att_h.h, NH);
    dev().attention_backward(dqkv.d, g.d, qkv.d, att_h.d, NH);
    expect_close(dqkv, tol, "attention backward");

    auto ge = empty({B, T, C}, A);
    cpu().gelu_forward(ge.h, x.h);
    dev().gelu_forward(ge.d, x.d);
    expect_close(ge, tol, "gelu forward");
    auto dge = rnd({B, T, C}, A, 21);
    cpu().gelu_backward(dge.h, x.h, g.h);
    dev().gelu_backward(dge.d, x.d, g.d);
    expect_close(dge, tol, "gelu backward");

    auto y2 = rnd({B, T, C}, A, 22);
    auto res = empty({B, T, C}, A);
    cpu().residual_forward(res.h, x.h, y2.h);
    dev().residual_forward(res.d, x.d, y2.d);
    expect_close(res, tol, "residual forward");
    auto da = rnd({B, T, C}, A, 23), dbb = rnd({B, T, C}, A, 24);
    cpu().residual_backward(da.h, dbb.h, g.h);
    dev().residual_backward(da.d, dbb.d, g.d);
    expect_close(da, tol, "residual backward: da");
    expect_close(dbb, tol, "residual backward: db");

    auto bo = empty({B, T, C}, A);
    cpu().bias_forward(bo.h, x.h, bias.h);
    dev().bias_forward(bo.d, x.d, bias.d);
    expect_close(bo, tol, "bias forward");
    auto dbi = rnd({B, T, C}, A, 25), dbias = rnd({C}, dtype::f32, 26);
    cpu().bias_backward(&dbi.h, dbias.h, g.h);
    dev().bias_backward(&dbi.d, dbias.d, g.d);
    expect_close(dbi, tol, "bias backward: din");
    expect_close(dbias, tol, "bias backward: dbias");

    // The last few columns are padding, left out of the softmax.
    const int valid = V - 3;
    auto logits = rnd({B, T, V}, A, 27, 3.0f);
    auto targets = ids({B, T}, valid, 28);
    auto losses = empty({B, T}, dtype::f32), probs = empty({N, V}, dtype::f32);
    cpu().crossentropy_forward(losses.h, probs.h, logits.h, targets.h, valid);
    dev().crossentropy_forward(losses.d, probs.d, logits.d, targets.d, valid);
    expect_close(losses, tol, "cross-entropy forward: losses");
    expect_close(probs, tol, "cross-entropy forward: probabilities");
    auto dl = rnd({B, T}, dtype::f32, 29), dlogits = rnd({B, T, V}, A, 30);
    cpu().crossentropy_backward(dlogits.h, dl.h, probs.h, targets.h);
    dev().crossentropy_backward(dlogits.d, dl.d, probs.h.to(gpu0), targets.d);
    expect_close(dlogits, tol, "cross-entropy backward");

    // Vocabulary parallelism: shard 1 of 2 holds the upper half of the ids.
    const int Vs = V / 2, first = V - Vs;
    auto shard_logits = rnd({B, T, Vs}, A, 31, 3.0f);
    auto half = rnd({Vs, C}, dtype::f32, 32), pos = rnd({T, C}, dtype::f32, 33);
    auto emb = empty({B, T, C}, A);
    cpu().embedding_shard_forward(emb.h, tokens.h, half.h, &pos.h, first);
    dev().embedding_shard_forward(emb.d, tokens.d, half.d, &pos.d, first);
    expect_close(emb, tol, "vocabulary-parallel embedding forward");
    auto dhalf = rnd({Vs, C}, dtype::f32, 34), dpos = rnd({T, C}, dtype::f32, 35);
    cpu().embedding_shard_backward(dhalf.h, &dpos.h, g.h, tokens.h, first);
    dev().embedding_shard_backward(dhalf.d, &dpos.d, g.d, tokens.d, first);
    expect_close(dhalf, tol, "vocabulary-parallel embedding backward: rows");
    expect_close(dpos, tol, "vocabulary-parallel embedding backward: positions");
    auto stats = empty({B, T, 4}, dtype::f32);
    cpu().vocab_ce_stats(stats.h, shard_logits.h, targets.h, first, valid, 1);
    dev().vocab_ce_stats(stats.d, shard_logits.d, targets.d, first, valid, 1);
    expect_close(stats, tol, "vocabulary-parallel cross-entropy statistics");
    auto vloss = empty({B, T}, dtype::f32);
    cpu().vocab_ce_loss(vloss.h, stats.h);
    dev().vocab_ce_loss(vloss.d, stats.h.to(gpu0));
    expect_close(vloss, tol, "vocabulary-parallel cross-entropy loss");
    auto dshard = rnd({B, T, Vs}, A, 36);
    cpu().vocab_ce_backward(dshard.h, dl.h, shard_logits.h, stats.h, targets.h, first, valid);
    dev().vocab_ce_backward(dshard.d, dl.d, shard_logits.d, stats.h.to(gpu0), targets.d, first,
                            valid);
    expect_close(dshard, tol, "vocabulary-parallel cross-entropy backward");
  }

  // Conversions both ways and mixed-type sums.
  auto f = rnd({1000}, dtype::f32, 31), h16 = empty({1000}, dtype::bf16);
  cpu().copy(h16.h, f.h);
  dev().copy(h16.d, f.d);
  expect_close(h16, 0, "float to bf16 (round to nearest even on both)");
  auto acc = rnd({1000}, dtype::f32, 32);
  cpu().accumulate(acc.h, h16.h);
  dev().accumulate(acc.d, h16.d);
  expect_close(acc, 1e-7, "float += bf16");
}

// The Llama family's operations: grouped-query attention (groups 2 and 1 of
// 4 heads), RMSNorm, rotary embedding (an offset, one head of two rotated,
// in place and not) and SwiGLU, against the CPU backend.
TEST_CASE("the Llama operations on the device match the CPU backend", "[gpu][backend][llama]") {
  const int B = 2, T = 48, C = 64, NH = 4, hs = C / NH, F = 72;
  const int64_t N = int64_t(B) * T;
  for (dtype A : {dtype::f32, dtype::bf16}) {
    INFO("activations " << model::dtype_name(A));
    const double tol = tol_of(A);
    for (int G : {2, 1}) {
      INFO("groups " << G);
      const int W = C + 2 * G * hs;
      auto qkv = rnd({B, T, W}, A, 40 + G);
      auto out = empty({B, T, C}, A), att = empty({B, NH, T, T}, A);
      cpu().gqa_attention_forward(out.h, att.h, qkv.h, NH, G);
      dev().gqa_attention_forward(out.d, att.d, qkv.d, NH, G);
      expect_close(out, tol, "grouped-query attention forward");
      auto g = rnd({B, T, C}, A, 44), dqkv = rnd({B, T, W}, A, 45);
      auto att_h = both{att.h.clone(), att.h.to(gpu0)};
      cpu().gqa_attention_backward(dqkv.h, g.h, qkv.h, att_h.h, NH, G);
      dev().gqa_attention_backward(dqkv.d, g.d, qkv.d, att_h.d, NH, G);
      expect_close(dqkv, tol, "grouped-query attention backward");
    }

    auto x = rnd({B, T, C}, A, 50);
    auto w = rnd({C}, dtype::f32, 51);
    auto y = empty({B, T, C}, A), rstd = empty({N}, dtype::f32);
    cpu().rmsnorm_forward(y.h, rstd.h, x.h, w.h, 1e-5f);
    dev().rmsnorm_forward(y.d, rstd.d, x.d, w.d, 1e-5f);
    expect_close(y, tol, "rmsnorm forward");
    expect_close(rstd, tol, "rmsnorm rstd");
    auto g = rnd({B, T, C}, A, 52), dx = rnd({B, T, C}, A, 53), dw = rnd({C}, dtype::f32, 54);
    cpu().rmsnorm_backward(dx.h, dw.h, g.h, x.h, w.h, rstd.h);
    dev().rmsnorm_backward(dx.d, dw.d, g.d, x.d, w.d, rstd.d);
    expect_close(dx, tol, "rmsnorm backward: din");
    expect_close(dw, tol, "rmsnorm backward: dweight");

    auto r = empty({B, T, C}, A);
    cpu().rope_forward(r.h, x.h, 2, 2 * hs, 10000.f, 37);
    dev().rope_forward(r.d, x.d, 2, 2 * hs, 10000.f, 37);
    expect_close(r, tol, "rope forward, two of four heads of 32");
    auto inplace = both{x.h.clone(), x.d.clone()};
    cpu().rope_forward(inplace.h, inplace.h, NH, hs, 500000.f, 1000);
    dev().rope_forward(inplace.d, inplace.d, NH, hs, 500000.f, 1000);
    expect_close(inplace, tol, "rope forward in place at offset 1000");
    auto dr = rnd({B, T, C}, A, 55);
    cpu().rope_backward(dr.h, g.h, 2, 2 * hs, 10000.f, 37);
    dev().rope_backward(dr.d, g.d, 2, 2 * hs, 10000.f, 37);
    expect_close(dr, tol, "rope backward");

    auto gu = rnd({B, T, 2 * F}, A, 56);
    auto sw = empty({B, T, F}, A);
    cpu().swiglu_forward(sw.h, gu.h);
    dev().swiglu_forward(sw.d, gu.d);
    expect_close(sw, tol, "swiglu forward");
    auto gs = rnd({B, T, F}, A, 57), dgu = rnd({B, T, 2 * F}, A, 58);
    cpu().swiglu_backward(dgu.h, gu.h, gs.h);
    dev().swiglu_backward(dgu.d, gu.d, gs.d);
    expect_close(dgu, tol, "swiglu backward");
  }
}

// The fused attention (bf16, head sizes 64 and 128): the device asks for the
// log-sum-exp stash, and its forward and backward match the CPU's
// probabilities path, with T off the 64-row tiles and grouped heads.
TEST_CASE("fused attention on the device matches the CPU backend", "[gpu][backend][attention]") {
  fused_attention_on fused;
  const dtype A = dtype::bf16;
  for (int hs : {64, 128})
    for (int G : {4, 2, 1}) {
      const int B = 2, T = 100, NH = 4, C = NH * hs, W = C + 2 * G * hs;
      INFO("head size " << hs << ", groups " << G);
      const auto stash = dev().attention_stash_for(B, NH, T, hs, A);
      REQUIRE(stash.shape == model::shape_t{B, NH, T});
      REQUIRE(stash.type == dtype::f32);
      auto qkv = rnd({B, T, W}, A, 70 + hs + G);
      auto out = empty({B, T, C}, A);
      tensor att_h({B, NH, T, T}, A), lse({B, NH, T}, dtype::f32, gpu0);
      cpu().gqa_attention_forward(out.h, att_h, qkv.h, NH, G);
      dev().gqa_attention_forward(out.d, lse, qkv.d, NH, G);
      expect_close(out, 1e-2, "fused attention forward");
      auto g = rnd({B, T, C}, A, 80 + hs + G), dqkv = rnd({B, T, W}, A, 90 + hs + G);
      cpu().gqa_attention_backward(dqkv.h, g.h, qkv.h, att_h, NH, G);
      dev().gqa_attention_backward(dqkv.d, g.d, qkv.d, lse, NH, G);
      expect_close(dqkv, 1e-2, "fused attention backward");
    }
  // float activations keep the probabilities, and so does bf16 with the
  // fused kernel off.
  REQUIRE(dev().attention_stash_for(2, 4, 100, 64, dtype::f32).shape ==
          model::shape_t{2, 4, 100, 100});
  gpu::set_fused_attention(false);
  REQUIRE(dev().attention_stash_for(2, 4, 100, 64, dtype::bf16).shape ==
          model::shape_t{2, 4, 100, 100});
}

TEST_CASE("the optimizer's operations on the device match the CPU backend", "[gpu][backend]") {
  auto w = rnd({3, 1001}, dtype::f32, 60), g = rnd({3, 1001}, dtype::f32, 61);
  auto m = rnd({3, 1001}, dtype::f32, 62, 0.1f), v = rnd({3, 1001}, dtype::f32, 63, 0.1f);
  cpu().scale(v.h, 0.f);  // second moments start at 0 and stay >= 0
  v.d.fill_zero();
  const double want = cpu().sum_squares(g.h), got = dev().sum_squares(g.d);
  CHECK(got == Approx(want).epsilon(1e-12));
  cpu().scale(g.h, 0.5f);
  dev().scale(g.d, 0.5f);
  expect_close(g, 0, "scale");
  for (bool zero : {false, true}) {
    const model::backend::adamw_args a{1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 10.f, 20.f, 0.7f, zero};
    cpu().adamw_update(w.h, g.h, m.h, v.h, a);
    dev().adamw_update(w.d, g.d, m.d, v.d, a);
    expect_close(w, 1e-6, "adamw: weights");
    expect_close(m, 1e-6, "adamw: first moments");
    expect_close(v, 1e-6, "adamw: second moments");
    expect_close(g, 0, "adamw: gradients");
  }
}

// The whole single-device trainer on the GPU against the CPU: the same data,
// initial weights and steps (float, exact GEMMs; bf16 within bf16's noise).
// In bf16 every activation gradient is rounded to 8 bits of mantissa after
// sums taken in other orders on the two sides, so the gradient norm (a few
// large entries) moves by several percent while the losses stay within 1%.
namespace {

// Returns the validation losses after o.steps steps, the CPU's first.
std::pair<double, double> expect_gpu_training_matches(model::train_options o) {
  const bool b16 = o.model.activations == dtype::bf16;
  const int T = o.model.max_seq;
  auto corpus = [&] { return model::text_corpus(test::small_text(6000), T, 0.1, "tiny"); };
  model::trainer on_cpu(o, corpus());
  o.where = gpu0;
  model::trainer on_gpu(o, corpus());
  for (int s = 0; s < o.steps; ++s) {
    const auto a = on_cpu.train_step(), b = on_gpu.train_step();
    INFO(model::model_family_name(o.model.family)
         << " " << model::dtype_name(o.model.activations) << " step " << s + 1 << ": cpu " << a.loss
         << " gpu " << b.loss);
    CHECK(b.loss == Approx(a.loss).epsilon(b16 ? 1e-2 : 1e-4));
    CHECK(b.grad_norm == Approx(a.grad_norm).epsilon(b16 ? 1e-1 : 1e-3));
  }
  return {on_cpu.validation_loss(), on_gpu.validation_loss()};
}

model::train_options small_training(dtype A, int seq, int dim, int heads, int batch, int steps,
                                    uint64_t seed) {
  model::train_options o;
  o.model = {.vocab = 256, .max_seq = seq, .layers = 2, .dim = dim, .heads = heads};
  o.model.activations = A;
  o.batch = batch;
  o.steps = steps;
  o.lr = 3e-3f;
  o.warmup = 2;
  o.seed = seed;
  return o;
}

}  // namespace

TEST_CASE("training steps on the GPU match the CPU's", "[gpu][training]") {
  gpu::set_float_gemm_math(gpu::gemm_math::exact);
  for (dtype A : {dtype::f32, dtype::bf16}) {
    const auto [cpu_loss, gpu_loss] =
        expect_gpu_training_matches(small_training(A, 32, 64, 4, 8, 10, 7));
    CHECK(gpu_loss == Approx(cpu_loss).epsilon(A == dtype::bf16 ? 1e-2 : 1e-4));
  }
}

// Training with the fused attention (bf16, head size 64) against the CPU.
TEST_CASE("training with fused attention on the GPU matches the CPU's", "[gpu][training]") {
  gpu::set_float_gemm_math(gpu::gemm_math::exact);
  fused_attention_on fused;
  expect_gpu_training_matches(small_training(dtype::bf16, 64, 128, 2, 4, 6, 5));
}

// A Llama-shaped model (grouped-query attention, RMSNorm, RoPE, SwiGLU,
// untied output layer) trained on the GPU against the CPU.
TEST_CASE("Llama training steps on the GPU match the CPU's", "[gpu][training][llama]") {
  gpu::set_float_gemm_math(gpu::gemm_math::exact);
  for (dtype A : {dtype::f32, dtype::bf16}) {
    auto o = small_training(A, 32, 64, 4, 8, 8, 9);
    o.model.family = model::model_family::llama;
    o.model.query_groups = 2;
    o.model.ffn_hidden = 96;
    expect_gpu_training_matches(o);
  }
}

// Parallel layouts with the stage actors' tensors on the GPU against the
// single GPU: the same sums in other orders, as on the CPU (1e-5), loosened
// for the GPU kernels' own orders (atomic embedding sums).
TEST_CASE("parallel layouts on the GPU match one GPU", "[gpu][actors]") {
  gpu::set_float_gemm_math(gpu::gemm_math::exact);
  model::train_options o;
  o.model = {.vocab = 256, .max_seq = 16, .layers = 4, .dim = 32, .heads = 8};
  o.batch = 16;
  o.steps = 6;
  o.lr = 3e-3f;
  o.warmup = 2;
  o.seed = 11;
  o.where = gpu0;
  auto corpus = [] { return model::text_corpus(test::small_text(4000), 16, 0.1, "tiny"); };
  std::vector<double> reference;
  {
    model::trainer one(o, corpus());
    while (!one.done()) reference.push_back(one.train_step().loss);
  }
  struct layout {
    int dp, tp, pp, m;
    partition::schedule_kind kind;
    int chunks;
  };
  const layout layouts[] = {{1, 1, 2, 4, partition::schedule_kind::one_f_one_b, 1},
                            {2, 1, 1, 2, partition::schedule_kind::one_f_one_b, 1},
                            {1, 2, 1, 1, partition::schedule_kind::one_f_one_b, 1},
                            {2, 2, 2, 2, partition::schedule_kind::shifted, 1},
                            {1, 1, 2, 4, partition::schedule_kind::zb_h1, 1},
                            {1, 1, 2, 4, partition::schedule_kind::interleaved, 2}};
  for (auto& l : layouts) {
    INFO("dp=" << l.dp << " tp=" << l.tp << " pp=" << l.pp << " "
               << partition::schedule_name(l.kind));
    auto par = test::parallel_layout(l.dp, l.tp, l.pp, l.m, l.kind, l.chunks);
    par.timeout_s = 120;
    actors::parallel_trainer tr(o, par, corpus());
    for (size_t s = 0; s < reference.size(); ++s) {
      const double loss = tr.train_step().loss;
      INFO("step " << s + 1 << ": " << loss << " vs " << reference[s]);
      CHECK(loss == Approx(reference[s]).epsilon(1e-4));
    }
  }
}

TEST_CASE("TF32 GEMMs stay within TF32's precision of float", "[gpu][backend]") {
  gpu::set_float_gemm_math(gpu::gemm_math::tf32);
  const int B = 4, T = 128, C = 256, OC = 768;
  auto x = rnd({B, T, C}, dtype::f32, 40), w = rnd({OC, C}, dtype::f32, 41, 0.05f);
  auto y = empty({B, T, OC}, dtype::f32);
  cpu().matmul_forward(y.h, x.h, w.h, nullptr);
  dev().matmul_forward(y.d, x.d, w.d, nullptr);
  expect_close(y, 2e-3, "TF32 matmul forward");
  gpu::set_float_gemm_math(gpu::gemm_math::exact);
}

TEST_CASE("device tensors copy, clone and zero through the CUDA memory", "[gpu][memory]") {
  auto x = test::random_tensor({3, 1000}, 50);
  tensor d = x.to(gpu0);
  CHECK(d.where() == gpu0);
  tensor c = d.clone();
  tensor back = c.to(model::device::cpu());
  for (int64_t i = 0; i < x.numel(); ++i) REQUIRE(back.f32()[i] == x.f32()[i]);
  c.fill_zero();
  back = c.to(model::device::cpu());
  for (int64_t i = 0; i < x.numel(); ++i) REQUIRE(back.f32()[i] == 0.f);
  // A host tensor handed to the CUDA backend is refused by name.
  tensor host_out({3, 1000});
  CHECK_THROWS_WITH(dev().gelu_forward(host_out, d), Catch::Contains("on cpu"));
}

int main(int argc, char* argv[]) {
  if (gpu::cuda_devices().empty()) {
    std::printf("skipped: %s\n", gpu::cuda_unavailable_reason().c_str());
    return 77;
  }
  gpu::enable_cuda();
  return Catch::Session().run(argc, argv);
}
