// The CPU backend: kernels/kernels.hpp behind the backend interface,
// dispatching on the activations' element type (float or bf16).
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <vector>

#include "core/error.hpp"
#include "model/backend.hpp"
#include "model/kernels/kernels.hpp"

namespace merak::model {
namespace {

namespace k = kernels;

// Checks that every tensor has the element type `want`, naming the operation.
void expect_type(const char* op, dtype want, std::initializer_list<const tensor*> ts) {
  for (const tensor* t : ts)
    if (t && t->type() != want)
      fail("{}: a {} tensor {} where {} is expected", op, dtype_name(t->type()),
           shape_str(t->shape()), dtype_name(want));
}

class cpu_backend final : public backend {
 public:
  std::string_view name() const override { return "cpu"; }

  void encoder_forward(tensor& out, const tensor& tokens, const tensor& wte,
                       const tensor& wpe) override {
    const int B = int(tokens.dim(0)), T = int(tokens.dim(1)), C = cols_of(out);
    if (is_bf16(out))
      k::encoder_forward(out.bf16s(), tokens.data<int32_t>(), wte.f32(), wpe.f32(), B, T, C);
    else
      k::encoder_forward(out.f32(), tokens.data<int32_t>(), wte.f32(), wpe.f32(), B, T, C);
  }
  void encoder_backward(tensor& dwte, tensor& dwpe, const tensor& dout,
                        const tensor& tokens) override {
    const int B = int(tokens.dim(0)), T = int(tokens.dim(1)), C = cols_of(dout),
              V = int(dwte.dim(0));
    if (is_bf16(dout))
      k::encoder_backward(dwte.f32(), dwpe.f32(), dout.bf16s(), tokens.data<int32_t>(), B, T, C, V);
    else
      k::encoder_backward(dwte.f32(), dwpe.f32(), dout.f32(), tokens.data<int32_t>(), B, T, C, V);
  }

  void layernorm_forward(tensor& out, tensor& mean, tensor& rstd, const tensor& in,
                         const tensor& weight, const tensor& bias) override {
    expect_type("layernorm", out.type(), {&in});
    if (is_bf16(in))
      k::layernorm_forward(out.bf16s(), mean.f32(), rstd.f32(), in.bf16s(), weight.f32(),
                           bias.f32(), rows_of(in), cols_of(in));
    else
      k::layernorm_forward(out.f32(), mean.f32(), rstd.f32(), in.f32(), weight.f32(), bias.f32(),
                           rows_of(in), cols_of(in));
  }
  void layernorm_backward(tensor& din, tensor& dweight, tensor& dbias, const tensor& dout,
                          const tensor& in, const tensor& weight, const tensor& mean,
                          const tensor& rstd) override {
    expect_type("layernorm backward", in.type(), {&din, &dout});
    if (is_bf16(in))
      k::layernorm_backward(din.bf16s(), dweight.f32(), dbias.f32(), dout.bf16s(), in.bf16s(),
                            weight.f32(), mean.f32(), rstd.f32(), rows_of(in), cols_of(in));
    else
      k::layernorm_backward(din.f32(), dweight.f32(), dbias.f32(), dout.f32(), in.f32(),
                            weight.f32(), mean.f32(), rstd.f32(), rows_of(in), cols_of(in));
  }

  void matmul_forward(tensor& out, const tensor& in, const tensor& weight,
                      const tensor* bias) override {
    expect_type("linear", in.type(), {&out, &weight});
    const int N = rows_of(in), C = cols_of(in), OC = int(weight.dim(0));
    const float* b = bias ? bias->f32() : nullptr;
    if (is_bf16(in))
      k::matmul_forward(out.bf16s(), in.bf16s(), weight.bf16s(), b, N, C, OC);
    else
      k::matmul_forward(out.f32(), in.f32(), weight.f32(), b, N, C, OC);
  }
  void matmul_backward(tensor* din, tensor* dweight, tensor* dbias, const tensor& dout,
                       const tensor& in, const tensor& weight) override {
    expect_type("linear backward", in.type(), {din, &dout, &weight});
    const int N = rows_of(in), C = cols_of(in), OC = int(weight.dim(0));
    float* db = dbias ? dbias->f32() : nullptr;
    float* dw = dweight ? dweight->f32() : nullptr;
    if (is_bf16(in))
      k::matmul_backward(din ? din->bf16s() : nullptr, dw, db, dout.bf16s(), in.bf16s(),
                         weight.bf16s(), N, C, OC);
    else
      k::matmul_backward(din ? din->f32() : nullptr, dw, db, dout.f32(), in.f32(), weight.f32(), N,
                         C, OC);
  }

  void attention_forward(tensor& out, tensor& att, const tensor& qkv, int heads) override {
    expect_type("attention", qkv.type(), {&out, &att});
    const int B = int(qkv.dim(0)), T = int(qkv.dim(1)), C = cols_of(out);
    if (is_bf16(qkv))
      k::attention_forward(out.bf16s(), att.bf16s(), qkv.bf16s(), B, T, C, heads);
    else
      k::attention_forward(out.f32(), att.f32(), qkv.f32(), B, T, C, heads);
  }
  void attention_backward(tensor& dqkv, const tensor& dout, const tensor& qkv, const tensor& att,
                          int heads) override {
    expect_type("attention backward", qkv.type(), {&dqkv, &dout, &att});
    const int B = int(qkv.dim(0)), T = int(qkv.dim(1)), C = cols_of(dout);
    if (is_bf16(qkv)) {
      k::attention_backward(dqkv.bf16s(), dout.bf16s(), qkv.bf16s(), att.bf16s(), B, T, C, heads);
      return;
    }
    // Per-thread dP/dS blocks, reused across calls.
    static thread_local std::vector<float> scratch;
    const size_t need = size_t(k::attention_scratch_floats(T)) * size_t(omp_get_max_threads());
    if (scratch.size() < need) scratch.resize(need);
    k::attention_backward(dqkv.f32(), dout.f32(), qkv.f32(), att.f32(), scratch.data(), B, T, C,
                          heads);
  }

  void gqa_attention_forward(tensor& out, tensor& att, const tensor& qkv, int heads,
                             int groups) override {
    expect_type("grouped-query attention", qkv.type(), {&out, &att});
    const int B = int(qkv.dim(0)), T = int(qkv.dim(1)), C = cols_of(out);
    check_attention_groups(qkv, C, heads, groups);
    if (is_bf16(qkv))
      k::attention_forward(out.bf16s(), att.bf16s(), qkv.bf16s(), B, T, C, heads, groups);
    else
      k::attention_forward(out.f32(), att.f32(), qkv.f32(), B, T, C, heads, groups);
  }
  void gqa_attention_backward(tensor& dqkv, const tensor& dout, const tensor& qkv,
                              const tensor& att, int heads, int groups) override {
    expect_type("grouped-query attention backward", qkv.type(), {&dqkv, &dout, &att});
    const int B = int(qkv.dim(0)), T = int(qkv.dim(1)), C = cols_of(dout);
    check_attention_groups(qkv, C, heads, groups);
    if (is_bf16(qkv)) {
      k::attention_backward(dqkv.bf16s(), dout.bf16s(), qkv.bf16s(), att.bf16s(), B, T, C, heads,
                            groups);
      return;
    }
    static thread_local std::vector<float> scratch;
    const size_t need = size_t(k::attention_scratch_floats(T)) * size_t(omp_get_max_threads());
    if (scratch.size() < need) scratch.resize(need);
    k::attention_backward(dqkv.f32(), dout.f32(), qkv.f32(), att.f32(), scratch.data(), B, T, C,
                          heads, groups);
  }

  void rmsnorm_forward(tensor& out, tensor& rstd, const tensor& in, const tensor& weight,
                       float eps) override {
    expect_type("rmsnorm", out.type(), {&in});
    if (is_bf16(in))
      k::rmsnorm_forward(out.bf16s(), rstd.f32(), in.bf16s(), weight.f32(), rows_of(in),
                         cols_of(in), eps);
    else
      k::rmsnorm_forward(out.f32(), rstd.f32(), in.f32(), weight.f32(), rows_of(in), cols_of(in),
                         eps);
  }
  void rmsnorm_backward(tensor& din, tensor& dweight, const tensor& dout, const tensor& in,
                        const tensor& weight, const tensor& rstd) override {
    expect_type("rmsnorm backward", in.type(), {&din, &dout});
    if (is_bf16(in))
      k::rmsnorm_backward(din.bf16s(), dweight.f32(), dout.bf16s(), in.bf16s(), weight.f32(),
                          rstd.f32(), rows_of(in), cols_of(in));
    else
      k::rmsnorm_backward(din.f32(), dweight.f32(), dout.f32(), in.f32(), weight.f32(), rstd.f32(),
                          rows_of(in), cols_of(in));
  }

  void rope_forward(tensor& out, const tensor& in, int rotated_heads, int head_size, float theta,
                    int position_offset) override {
    expect_type("rope", in.type(), {&out});
    check_rope_shape(in, rotated_heads, head_size);
    const int B = int(in.dim(0)), T = int(in.dim(1)), W = cols_of(in);
    if (is_bf16(in))
      k::rope_forward(out.bf16s(), in.bf16s(), B, T, W, rotated_heads, head_size, theta,
                      position_offset);
    else
      k::rope_forward(out.f32(), in.f32(), B, T, W, rotated_heads, head_size, theta,
                      position_offset);
  }
  void rope_backward(tensor& din, const tensor& dout, int rotated_heads, int head_size, float theta,
                     int position_offset) override {
    expect_type("rope backward", dout.type(), {&din});
    check_rope_shape(dout, rotated_heads, head_size);
    const int B = int(dout.dim(0)), T = int(dout.dim(1)), W = cols_of(dout);
    if (is_bf16(dout))
      k::rope_backward(din.bf16s(), dout.bf16s(), B, T, W, rotated_heads, head_size, theta,
                       position_offset);
    else
      k::rope_backward(din.f32(), dout.f32(), B, T, W, rotated_heads, head_size, theta,
                       position_offset);
  }

  void swiglu_forward(tensor& out, const tensor& in) override {
    expect_type("swiglu", in.type(), {&out});
    MERAK_CHECK(cols_of(in) == 2 * cols_of(out), "swiglu of {} into {}", shape_str(in.shape()),
                shape_str(out.shape()));
    if (is_bf16(in))
      k::swiglu_forward(out.bf16s(), in.bf16s(), rows_of(in), cols_of(out));
    else
      k::swiglu_forward(out.f32(), in.f32(), rows_of(in), cols_of(out));
  }
  void swiglu_backward(tensor& din, const tensor& in, const tensor& dout) override {
    expect_type("swiglu backward", in.type(), {&din, &dout});
    MERAK_CHECK(cols_of(in) == 2 * cols_of(dout), "swiglu backward of {} from {}",
                shape_str(in.shape()), shape_str(dout.shape()));
    if (is_bf16(in))
      k::swiglu_backward(din.bf16s(), in.bf16s(), dout.bf16s(), rows_of(in), cols_of(dout));
    else
      k::swiglu_backward(din.f32(), in.f32(), dout.f32(), rows_of(in), cols_of(dout));
  }

  void gelu_forward(tensor& out, const tensor& in) override {
    expect_type("gelu", in.type(), {&out});
    if (is_bf16(in))
      k::gelu_forward(out.bf16s(), in.bf16s(), in.numel());
    else
      k::gelu_forward(out.f32(), in.f32(), in.numel());
  }
  void gelu_backward(tensor& din, const tensor& in, const tensor& dout) override {
    expect_type("gelu backward", in.type(), {&din, &dout});
    if (is_bf16(in))
      k::gelu_backward(din.bf16s(), in.bf16s(), dout.bf16s(), in.numel());
    else
      k::gelu_backward(din.f32(), in.f32(), dout.f32(), in.numel());
  }

  void residual_forward(tensor& out, const tensor& a, const tensor& b) override {
    expect_type("residual", out.type(), {&a, &b});
    if (is_bf16(out))
      k::residual_forward(out.bf16s(), a.bf16s(), b.bf16s(), out.numel());
    else
      k::residual_forward(out.f32(), a.f32(), b.f32(), out.numel());
  }
  void residual_backward(tensor& da, tensor& db, const tensor& dout) override {
    expect_type("residual backward", dout.type(), {&da, &db});
    if (is_bf16(dout))
      k::residual_backward(da.bf16s(), db.bf16s(), dout.bf16s(), dout.numel());
    else
      k::residual_backward(da.f32(), db.f32(), dout.f32(), dout.numel());
  }

  void bias_forward(tensor& out, const tensor& in, const tensor& bias) override {
    expect_type("bias", in.type(), {&out});
    if (is_bf16(in))
      bias_fwd(out.bf16s(), in.bf16s(), bias.f32(), rows_of(in), cols_of(in));
    else
      bias_fwd(out.f32(), in.f32(), bias.f32(), rows_of(in), cols_of(in));
  }
  void bias_backward(tensor* din, tensor& dbias, const tensor& dout) override {
    expect_type("bias backward", dout.type(), {din});
    if (is_bf16(dout))
      bias_bwd(din ? din->bf16s() : nullptr, dbias.f32(), dout.bf16s(), rows_of(dout),
               cols_of(dout));
    else
      bias_bwd(din ? din->f32() : nullptr, dbias.f32(), dout.f32(), rows_of(dout), cols_of(dout));
  }

  void copy(tensor& dst, const tensor& src) override {
    MERAK_CHECK(dst.numel() == src.numel(), "copy of {} into {}", shape_str(src.shape()),
                shape_str(dst.shape()));
    if (dst.type() == src.type())
      std::copy_n(src.raw(), src.bytes(), dst.raw());
    else if (is_bf16(dst) && src.type() == dtype::f32)
      convert(dst.bf16s(), src.f32(), src.numel());
    else if (dst.type() == dtype::f32 && is_bf16(src))
      convert(dst.f32(), src.bf16s(), src.numel());
    else
      fail("copy from {} to {} is not supported", dtype_name(src.type()), dtype_name(dst.type()));
  }
  void accumulate(tensor& dst, const tensor& src) override {
    MERAK_CHECK(dst.numel() == src.numel(), "sum of {} into {}", shape_str(src.shape()),
                shape_str(dst.shape()));
    const int64_t n = dst.numel();
    auto body = [n](auto* d, const auto* s) {
      for (int64_t i = 0; i < n; ++i) store(d[i], load(d[i]) + load(s[i]));
    };
    if (is_bf16(dst))
      is_bf16(src) ? body(dst.bf16s(), src.bf16s()) : body(dst.bf16s(), src.f32());
    else
      is_bf16(src) ? body(dst.f32(), src.bf16s()) : body(dst.f32(), src.f32());
  }

  void crossentropy_forward(tensor& losses, tensor& probs, const tensor& logits,
                            const tensor& targets, int valid) override {
    const int N = rows_of(logits), V = cols_of(logits);
    if (is_bf16(logits))
      k::crossentropy_forward(losses.f32(), probs.f32(), logits.bf16s(), targets.data<int32_t>(), N,
                              V, valid);
    else
      k::crossentropy_forward(losses.f32(), probs.f32(), logits.f32(), targets.data<int32_t>(), N,
                              V, valid);
  }
  void crossentropy_backward(tensor& dlogits, const tensor& dlosses, const tensor& probs,
                             const tensor& targets) override {
    const int N = rows_of(dlogits), V = cols_of(dlogits);
    if (is_bf16(dlogits))
      k::crossentropy_backward(dlogits.bf16s(), dlosses.f32(), probs.f32(), targets.data<int32_t>(),
                               N, V);
    else
      k::crossentropy_backward(dlogits.f32(), dlosses.f32(), probs.f32(), targets.data<int32_t>(),
                               N, V);
  }

  void embedding_shard_forward(tensor& out, const tensor& tokens, const tensor& wte,
                               const tensor* wpe, int first) override {
    const int B = int(tokens.dim(0)), T = int(tokens.dim(1)), C = cols_of(out),
              rows = int(wte.dim(0));
    const float* p = wpe ? wpe->f32() : nullptr;
    if (is_bf16(out))
      k::embedding_shard_forward(out.bf16s(), tokens.data<int32_t>(), wte.f32(), p, B, T, C, first,
                                 rows);
    else
      k::embedding_shard_forward(out.f32(), tokens.data<int32_t>(), wte.f32(), p, B, T, C, first,
                                 rows);
  }
  void embedding_shard_backward(tensor& dwte, tensor* dwpe, const tensor& dout,
                                const tensor& tokens, int first) override {
    const int B = int(tokens.dim(0)), T = int(tokens.dim(1)), C = cols_of(dout),
              rows = int(dwte.dim(0));
    float* p = dwpe ? dwpe->f32() : nullptr;
    if (is_bf16(dout))
      k::embedding_shard_backward(dwte.f32(), p, dout.bf16s(), tokens.data<int32_t>(), B, T, C,
                                  first, rows);
    else
      k::embedding_shard_backward(dwte.f32(), p, dout.f32(), tokens.data<int32_t>(), B, T, C,
                                  first, rows);
  }
  void vocab_ce_stats(tensor& stats, const tensor& logits, const tensor& targets, int first,
                      int valid, int part) override {
    const int N = rows_of(logits), Vs = cols_of(logits), parts = cols_of(stats) / 2;
    if (is_bf16(logits))
      k::vocab_ce_stats(stats.f32(), logits.bf16s(), targets.data<int32_t>(), N, Vs, first, valid,
                        part, parts);
    else
      k::vocab_ce_stats(stats.f32(), logits.f32(), targets.data<int32_t>(), N, Vs, first, valid,
                        part, parts);
  }
  void vocab_ce_loss(tensor& losses, const tensor& stats) override {
    k::vocab_ce_loss(losses.f32(), stats.f32(), rows_of(stats), cols_of(stats) / 2);
  }
  void vocab_ce_backward(tensor& dlogits, const tensor& dlosses, const tensor& logits,
                         const tensor& stats, const tensor& targets, int first,
                         int valid) override {
    const int N = rows_of(logits), Vs = cols_of(logits), parts = cols_of(stats) / 2;
    if (is_bf16(logits))
      k::vocab_ce_backward(dlogits.bf16s(), dlosses.f32(), logits.bf16s(), stats.f32(),
                           targets.data<int32_t>(), N, Vs, first, valid, parts);
    else
      k::vocab_ce_backward(dlogits.f32(), dlosses.f32(), logits.f32(), stats.f32(),
                           targets.data<int32_t>(), N, Vs, first, valid, parts);
  }

  // Partial sums over a fixed number of blocks, added in block order: the
  // result depends neither on which thread finishes first nor on how many
  // threads the runtime gives the team (resumed runs must match exactly).
  double sum_squares(const tensor& x) override {
    expect_type("sum of squares", dtype::f32, {&x});
    const float* g = x.f32();
    const int64_t n = x.numel();
    const int nth = omp_get_max_threads();
    std::vector<double> partial(size_t(nth) * 8, 0.0);  // padded against false sharing
#pragma omp parallel num_threads(nth)
    for (int blk = omp_get_thread_num(); blk < nth; blk += omp_get_num_threads()) {
      const int64_t j0 = n * blk / nth, j1 = n * (blk + 1) / nth;
      double s = 0;
#pragma omp simd reduction(+ : s)
      for (int64_t j = j0; j < j1; ++j) s += double(g[j]) * g[j];
      partial[size_t(blk) * 8] = s;
    }
    double total = 0;
    for (int t = 0; t < nth; ++t) total += partial[size_t(t) * 8];
    return total;
  }
  void scale(tensor& x, float factor) override {
    expect_type("scale", dtype::f32, {&x});
    float* g = x.f32();
    const int64_t n = x.numel();
#pragma omp parallel for simd schedule(static)
    for (int64_t j = 0; j < n; ++j) g[j] *= factor;
  }
  void adamw_update(tensor& value, tensor& grad, tensor& m, tensor& v,
                    const adamw_args& a) override {
    expect_type("adamw", dtype::f32, {&value, &grad, &m, &v});
    float *w = value.f32(), *g = grad.f32(), *mm = m.f32(), *vv = v.f32();
    const int64_t n = value.numel();
#pragma omp parallel for simd schedule(static)
    for (int64_t j = 0; j < n; ++j) {
      const float gj = a.grad_scale == 1.0f ? g[j] : g[j] * a.grad_scale;
      const float mj = a.beta1 * mm[j] + (1.0f - a.beta1) * gj;
      const float vj = a.beta2 * vv[j] + (1.0f - a.beta2) * gj * gj;
      mm[j] = mj;
      vv[j] = vj;
      w[j] -= a.lr * (mj * a.c1 / (std::sqrt(vj * a.c2) + a.eps) + a.weight_decay * w[j]);
      if (a.zero_grad) g[j] = 0.f;
    }
  }

 private:
  template <typename A>
  static void bias_fwd(A* y, const A* x, const float* b, int64_t N, int64_t C) {
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < N; ++r)
      for (int64_t c = 0; c < C; ++c) store(y[r * C + c], load(x[r * C + c]) + b[c]);
  }
  template <typename A>
  static void bias_bwd(A* dx, float* db, const A* g, int64_t N, int64_t C) {
    for (int64_t r = 0; r < N; ++r)
      for (int64_t c = 0; c < C; ++c) {
        float v = load(g[r * C + c]);
        db[c] += v;
        if (dx) store(dx[r * C + c], load(dx[r * C + c]) + v);
      }
  }
};

}  // namespace

namespace {
std::atomic<backend& (*)(int)> device_backends[2];
}  // namespace

void register_backend(device::kind k, backend& (*of)(int index)) {
  MERAK_CHECK(k != device::kind::cpu, "the CPU backend is built in");
  device_backends[size_t(k)].store(of, std::memory_order_release);
}

backend& backend_for(device d) {
  static cpu_backend cpu;
  if (d.type == device::kind::cpu) return cpu;
  auto of = device_backends[size_t(d.type)].load(std::memory_order_acquire);
  if (!of) fail("no backend for device {}: this program did not enable it", d.str());
  return of(d.index);
}

void check_attention_groups(const tensor& qkv, int C, int heads, int groups) {
  if (heads < 1 || groups < 1 || heads % groups != 0 || C % heads != 0)
    fail("grouped-query attention: {} groups of {} heads over {} channels", groups, heads, C);
  const int64_t want = C + 2 * int64_t(groups) * (C / heads);
  if (qkv.rank() != 3 || qkv.dim(2) != want)
    fail("grouped-query attention expects qkv (B, T, {}), got {}", want, shape_str(qkv.shape()));
}

void check_rope_shape(const tensor& t, int rotated_heads, int head_size) {
  if (head_size < 2 || head_size % 2 != 0 || rotated_heads < 0 || t.rank() != 3 ||
      int64_t(rotated_heads) * head_size > t.dim(2))
    fail("rope of {} heads of size {} (even) over {}", rotated_heads, head_size,
         shape_str(t.shape()));
}

}  // namespace merak::model
