#include "gpu/cuda_backend.hpp"

#include <memory>
#include <mutex>
#include <vector>

#include "gpu/attention.hpp"
#include "gpu/cuda_util.hpp"
#include "gpu/gemm.hpp"
#include "gpu/kernels.hpp"
#include "gpu/memory.hpp"
#include "model/backend.hpp"

namespace merak::gpu {
namespace {

using model::dtype;
using model::tensor;
namespace k = kernels;

class cuda_backend final : public model::backend {
 public:
  explicit cuda_backend(int index) : index_(index), name_(fmt::format("cuda:{}", index)) {}
  std::string_view name() const override { return name_; }

  void encoder_forward(tensor& out, const tensor& tokens, const tensor& wte,
                       const tensor& wpe) override {
    on({&out, &tokens, &wte, &wpe});
    k::encoder_forward(is_bf16(out), out.raw(), tokens.data<int32_t>(), wte.f32(), wpe.f32(),
                       int(tokens.dim(0)), int(tokens.dim(1)), cols_of(out), s());
  }
  void encoder_backward(tensor& dwte, tensor& dwpe, const tensor& dout,
                        const tensor& tokens) override {
    on({&dwte, &dwpe, &dout, &tokens});
    k::encoder_backward(is_bf16(dout), dwte.f32(), dwpe.f32(), dout.raw(), tokens.data<int32_t>(),
                        int(tokens.dim(0)), int(tokens.dim(1)), cols_of(dout), s());
  }

  void embedding_shard_forward(tensor& out, const tensor& tokens, const tensor& wte,
                               const tensor* wpe, int first) override {
    on({&out, &tokens, &wte, wpe});
    k::embedding_shard_forward(is_bf16(out), out.raw(), tokens.data<int32_t>(), wte.f32(),
                               wpe ? wpe->f32() : nullptr, int(tokens.dim(0)), int(tokens.dim(1)),
                               cols_of(out), first, int(wte.dim(0)), s());
  }
  void embedding_shard_backward(tensor& dwte, tensor* dwpe, const tensor& dout,
                                const tensor& tokens, int first) override {
    on({&dwte, dwpe, &dout, &tokens});
    k::embedding_shard_backward(is_bf16(dout), dwte.f32(), dwpe ? dwpe->f32() : nullptr,
                                dout.raw(), tokens.data<int32_t>(), int(tokens.dim(0)),
                                int(tokens.dim(1)), cols_of(dout), first, int(dwte.dim(0)), s());
  }
  void vocab_ce_stats(tensor& stats, const tensor& logits, const tensor& targets, int first,
                      int valid, int part) override {
    on({&stats, &logits, &targets});
    k::vocab_ce_stats(is_bf16(logits), stats.f32(), logits.raw(), targets.data<int32_t>(),
                      rows_of(logits), cols_of(logits), first, valid, part, cols_of(stats) / 2,
                      s());
  }
  void vocab_ce_loss(tensor& losses, const tensor& stats) override {
    on({&losses, &stats});
    k::vocab_ce_loss(losses.f32(), stats.f32(), rows_of(stats), cols_of(stats) / 2, s());
  }
  void vocab_ce_backward(tensor& dlogits, const tensor& dlosses, const tensor& logits,
                         const tensor& stats, const tensor& targets, int first,
                         int valid) override {
    on({&dlogits, &dlosses, &logits, &stats, &targets});
    k::vocab_ce_backward(is_bf16(logits), dlogits.raw(), dlosses.f32(), logits.raw(), stats.f32(),
                         targets.data<int32_t>(), rows_of(logits), cols_of(logits), first, valid,
                         cols_of(stats) / 2, s());
  }

  void layernorm_forward(tensor& out, tensor& mean, tensor& rstd, const tensor& in,
                         const tensor& weight, const tensor& bias) override {
    on({&out, &mean, &rstd, &in, &weight, &bias});
    same_type("layernorm", in, {&out});
    k::layernorm_forward(is_bf16(in), out.raw(), mean.f32(), rstd.f32(), in.raw(), weight.f32(),
                         bias.f32(), rows_of(in), cols_of(in), s());
  }
  void layernorm_backward(tensor& din, tensor& dweight, tensor& dbias, const tensor& dout,
                          const tensor& in, const tensor& weight, const tensor& mean,
                          const tensor& rstd) override {
    on({&din, &dweight, &dbias, &dout, &in, &weight, &mean, &rstd});
    same_type("layernorm backward", in, {&din, &dout});
    scratch partial(size_t(k::layernorm_partial_floats(rows_of(in), cols_of(in))) * sizeof(float),
                    index_);
    k::layernorm_backward(is_bf16(in), din.raw(), dweight.f32(), dbias.f32(), dout.raw(), in.raw(),
                          weight.f32(), mean.f32(), rstd.f32(), partial.as<float>(), rows_of(in),
                          cols_of(in), s());
  }

  // Row-major out (N,OC) = in (N,C) @ W^T is column-major out^T (OC x N) =
  // W' (C x OC)^T x in' (C x N), where X' is row-major X read column-major.
  void matmul_forward(tensor& out, const tensor& in, const tensor& weight,
                      const tensor* bias) override {
    on({&out, &in, &weight, bias});
    same_type("linear", in, {&out, &weight});
    const int N = rows_of(in), C = cols_of(in), OC = int(weight.dim(0));
    const bool b16 = is_bf16(in);
    gemm(index_, b16, b16, true, false, OC, N, C, 1.f, weight.raw(), C, in.raw(), C, 0.f, out.raw(),
         OC, s());
    if (bias) k::bias_forward(b16, out.raw(), out.raw(), bias->f32(), N, OC, s());
  }
  void matmul_backward(tensor* din, tensor* dweight, tensor* dbias, const tensor& dout,
                       const tensor& in, const tensor& weight) override {
    on({din, dweight, dbias, &dout, &in, &weight});
    same_type("linear backward", in, {din, &dout, &weight});
    const int N = rows_of(in), C = cols_of(in), OC = int(weight.dim(0));
    const bool b16 = is_bf16(in);
    // din' (C x N) += W' (C x OC) x dout' (OC x N)
    if (din)
      gemm(index_, b16, b16, false, false, C, N, OC, 1.f, weight.raw(), C, dout.raw(), OC, 1.f,
           din->raw(), C, s());
    // dW' (C x OC) += in' (C x N) x dout'^T (N x OC), in float
    if (dweight)
      gemm(index_, b16, false, false, true, C, OC, N, 1.f, in.raw(), C, dout.raw(), OC, 1.f,
           dweight->raw(), C, s());
    if (dbias) column_sums(*dbias, dout);
  }

  void attention_forward(tensor& out, tensor& att, const tensor& qkv, int heads) override {
    gqa_attention_forward(out, att, qkv, heads, heads);
  }
  void attention_backward(tensor& dqkv, const tensor& dout, const tensor& qkv, const tensor& att,
                          int heads) override {
    gqa_attention_backward(dqkv, dout, qkv, att, heads, heads);
  }
  // bf16 at head sizes 64 and 128: the fused forward, stashing each row's
  // log-sum-exp (B,heads,T) float; otherwise the probabilities.
  attention_stash attention_stash_for(int B, int heads, int T, int head_size,
                                      dtype activations) override {
    if (fused_attention_supported(activations == dtype::bf16, {B, T, heads * head_size, heads, 1}))
      return {{B, heads, T}, dtype::f32};
    return {{B, heads, T, T}, activations};
  }
  void gqa_attention_forward(tensor& out, tensor& att, const tensor& qkv, int heads,
                             int groups) override {
    on({&out, &att, &qkv});
    same_type("attention", qkv, {&out});
    model::check_attention_groups(qkv, cols_of(out), heads, groups);
    const attention_shape shape{int(qkv.dim(0)), int(qkv.dim(1)), cols_of(out), heads, groups};
    if (fused_stash(att, shape, is_bf16(qkv), "attention")) {
      fused_attention_forward(is_bf16(qkv), out.raw(), att.f32(), qkv.raw(), shape, s());
      return;
    }
    same_type("attention", qkv, {&att});
    gpu::attention_forward(index_, is_bf16(qkv), out.raw(), att.raw(), qkv.raw(), shape, s());
  }
  void gqa_attention_backward(tensor& dqkv, const tensor& dout, const tensor& qkv,
                              const tensor& att, int heads, int groups) override {
    on({&dqkv, &dout, &qkv, &att});
    same_type("attention backward", qkv, {&dqkv, &dout});
    model::check_attention_groups(qkv, cols_of(dout), heads, groups);
    const attention_shape shape{int(qkv.dim(0)), int(qkv.dim(1)), cols_of(dout), heads, groups};
    if (fused_stash(att, shape, is_bf16(qkv), "attention backward")) {
      fused_attention_backward(index_, is_bf16(qkv), dqkv.raw(), dout.raw(), qkv.raw(), att.f32(),
                               shape, s());
      return;
    }
    same_type("attention backward", qkv, {&att});
    gpu::attention_backward(index_, is_bf16(qkv), dqkv.raw(), dout.raw(), qkv.raw(), att.raw(),
                            shape, s());
  }

  void rmsnorm_forward(tensor& out, tensor& rstd, const tensor& in, const tensor& weight,
                       float eps) override {
    on({&out, &rstd, &in, &weight});
    same_type("rmsnorm", in, {&out});
    k::rmsnorm_forward(is_bf16(in), out.raw(), rstd.f32(), in.raw(), weight.f32(), eps, rows_of(in),
                       cols_of(in), s());
  }
  void rmsnorm_backward(tensor& din, tensor& dweight, const tensor& dout, const tensor& in,
                        const tensor& weight, const tensor& rstd) override {
    on({&din, &dweight, &dout, &in, &weight, &rstd});
    same_type("rmsnorm backward", in, {&din, &dout});
    scratch partial(size_t(k::layernorm_partial_floats(rows_of(in), cols_of(in))) * sizeof(float),
                    index_);
    k::rmsnorm_backward(is_bf16(in), din.raw(), dweight.f32(), dout.raw(), in.raw(), weight.f32(),
                        rstd.f32(), partial.as<float>(), rows_of(in), cols_of(in), s());
  }
  void rope_forward(tensor& out, const tensor& in, int rotated_heads, int head_size, float theta,
                    int position_offset) override {
    on({&out, &in});
    same_type("rope", in, {&out});
    model::check_rope_shape(in, rotated_heads, head_size);
    k::rope_forward(is_bf16(in), out.raw(), in.raw(), int(in.dim(0)), int(in.dim(1)), cols_of(in),
                    rotated_heads, head_size, theta, position_offset, s());
  }
  void rope_backward(tensor& din, const tensor& dout, int rotated_heads, int head_size, float theta,
                     int position_offset) override {
    on({&din, &dout});
    same_type("rope backward", dout, {&din});
    model::check_rope_shape(dout, rotated_heads, head_size);
    k::rope_backward(is_bf16(dout), din.raw(), dout.raw(), int(dout.dim(0)), int(dout.dim(1)),
                     cols_of(dout), rotated_heads, head_size, theta, position_offset, s());
  }
  void swiglu_forward(tensor& out, const tensor& in) override {
    on({&out, &in});
    same_type("swiglu", in, {&out});
    MERAK_CHECK(cols_of(in) == 2 * cols_of(out), "swiglu of {} into {}",
                model::shape_str(in.shape()), model::shape_str(out.shape()));
    k::swiglu_forward(is_bf16(in), out.raw(), in.raw(), rows_of(in), cols_of(out), s());
  }
  void swiglu_backward(tensor& din, const tensor& in, const tensor& dout) override {
    on({&din, &in, &dout});
    same_type("swiglu backward", in, {&din, &dout});
    MERAK_CHECK(cols_of(in) == 2 * cols_of(dout), "swiglu backward of {} from {}",
                model::shape_str(in.shape()), model::shape_str(dout.shape()));
    k::swiglu_backward(is_bf16(in), din.raw(), in.raw(), dout.raw(), rows_of(in), cols_of(dout),
                       s());
  }

  void gelu_forward(tensor& out, const tensor& in) override {
    on({&out, &in});
    same_type("gelu", in, {&out});
    k::gelu_forward(is_bf16(in), out.raw(), in.raw(), in.numel(), s());
  }
  void gelu_backward(tensor& din, const tensor& in, const tensor& dout) override {
    on({&din, &in, &dout});
    same_type("gelu backward", in, {&din, &dout});
    k::gelu_backward(is_bf16(in), din.raw(), in.raw(), dout.raw(), in.numel(), s());
  }

  void residual_forward(tensor& out, const tensor& a, const tensor& b) override {
    on({&out, &a, &b});
    same_type("residual", out, {&a, &b});
    k::residual_forward(is_bf16(out), out.raw(), a.raw(), b.raw(), out.numel(), s());
  }
  void residual_backward(tensor& da, tensor& db, const tensor& dout) override {
    on({&da, &db, &dout});
    same_type("residual backward", dout, {&da, &db});
    k::residual_backward(is_bf16(dout), da.raw(), db.raw(), dout.raw(), dout.numel(), s());
  }

  void bias_forward(tensor& out, const tensor& in, const tensor& bias) override {
    on({&out, &in, &bias});
    same_type("bias", in, {&out});
    k::bias_forward(is_bf16(in), out.raw(), in.raw(), bias.f32(), rows_of(in), cols_of(in), s());
  }
  void bias_backward(tensor* din, tensor& dbias, const tensor& dout) override {
    on({din, &dbias, &dout});
    same_type("bias backward", dout, {din});
    column_sums(dbias, dout);
    if (din)
      k::convert(is_bf16(*din), din->raw(), is_bf16(dout), dout.raw(), dout.numel(), true, s());
  }

  void copy(tensor& dst, const tensor& src) override {
    on({&dst, &src});
    MERAK_CHECK(dst.numel() == src.numel(), "copy of {} into {}", model::shape_str(src.shape()),
                model::shape_str(dst.shape()));
    if (dst.type() == src.type()) {
      MERAK_CUDA(cudaMemcpyAsync(dst.raw(), src.raw(), src.bytes(), cudaMemcpyDeviceToDevice, s()));
      return;
    }
    floating("copy", {&dst, &src});
    k::convert(is_bf16(dst), dst.raw(), is_bf16(src), src.raw(), src.numel(), false, s());
  }
  void accumulate(tensor& dst, const tensor& src) override {
    on({&dst, &src});
    MERAK_CHECK(dst.numel() == src.numel(), "sum of {} into {}", model::shape_str(src.shape()),
                model::shape_str(dst.shape()));
    floating("accumulate", {&dst, &src});
    k::convert(is_bf16(dst), dst.raw(), is_bf16(src), src.raw(), src.numel(), true, s());
  }

  void crossentropy_forward(tensor& losses, tensor& probs, const tensor& logits,
                            const tensor& targets, int valid) override {
    on({&losses, &probs, &logits, &targets});
    k::crossentropy_forward(is_bf16(logits), losses.f32(), probs.f32(), logits.raw(),
                            targets.data<int32_t>(), rows_of(logits), cols_of(logits), valid, s());
  }
  void crossentropy_backward(tensor& dlogits, const tensor& dlosses, const tensor& probs,
                             const tensor& targets) override {
    on({&dlogits, &dlosses, &probs, &targets});
    k::crossentropy_backward(is_bf16(dlogits), dlogits.raw(), dlosses.f32(), probs.f32(),
                             targets.data<int32_t>(), rows_of(dlogits), cols_of(dlogits), s());
  }

  double sum_squares(const tensor& x) override {
    on({&x});
    floats("sum of squares", {&x});
    const int blocks = k::sum_squares_blocks(x.numel());
    scratch partial(size_t(blocks) * sizeof(double), index_);
    k::sum_squares(partial.as<double>(), x.f32(), x.numel(), s());
    std::vector<double> host(static_cast<size_t>(blocks));
    MERAK_CUDA(cudaMemcpyAsync(host.data(), partial.as<double>(), host.size() * sizeof(double),
                               cudaMemcpyDeviceToHost, s()));
    MERAK_CUDA(cudaStreamSynchronize(s()));
    double sum = 0;
    for (double p : host) sum += p;
    return sum;
  }
  void scale(tensor& x, float factor) override {
    on({&x});
    floats("scale", {&x});
    k::scale(x.f32(), factor, x.numel(), s());
  }
  void adamw_update(tensor& value, tensor& grad, tensor& m, tensor& v,
                    const adamw_args& a) override {
    on({&value, &grad, &m, &v});
    floats("adamw", {&value, &grad, &m, &v});
    k::adamw(value.f32(), grad.f32(), m.f32(), v.f32(), value.numel(), a.lr, a.beta1, a.beta2,
             a.eps, a.weight_decay, a.c1, a.c2, a.grad_scale, a.zero_grad, s());
  }

 private:
  cudaStream_t s() const { return stream_of(index_); }
  static void floats(const char* op, std::initializer_list<const tensor*> ts) {
    for (const tensor* t : ts)
      if (t->type() != dtype::f32)
        fail("{}: a {} tensor {} where F32 is expected", op, model::dtype_name(t->type()),
             model::shape_str(t->shape()));
  }

  // Every tensor (null ones skipped) must live on this backend's device.
  void on(std::initializer_list<const tensor*> ts) const {
    for (const tensor* t : ts)
      if (t && t->defined() && !(t->where() == model::device::cuda(index_)))
        fail("{}: a tensor {} on {}", name_, model::shape_str(t->shape()), t->where().str());
    select_device(index_);
  }
  static void same_type(const char* op, const tensor& ref,
                        std::initializer_list<const tensor*> ts) {
    for (const tensor* t : ts)
      if (t && t->type() != ref.type())
        fail("{}: a {} tensor {} where {} is expected", op, model::dtype_name(t->type()),
             model::shape_str(t->shape()), model::dtype_name(ref.type()));
  }
  static void floating(const char* op, std::initializer_list<const tensor*> ts) {
    for (const tensor* t : ts)
      if (!model::is_floating(t->type()))
        fail("{}: {} tensors are not supported", op, model::dtype_name(t->type()));
  }
  // Whether `att` is the fused path's stash, lse (B,heads,T) float: then the
  // shape must allow the fused kernel. A (B,heads,T,T) stash is the
  // probabilities.
  static bool fused_stash(const tensor& att, const attention_shape& a, bool bf16, const char* op) {
    if (att.rank() != 3) return false;
    if (att.type() != dtype::f32 || att.dim(0) != a.B || att.dim(1) != a.NH || att.dim(2) != a.T ||
        !fused_attention_supported(bf16, a))
      fail(
          "{}: a stash {} {} where the fused kernel's ({}, {}, {}) F32 or the probabilities "
          "({}, {}, {}, {}) are expected",
          op, model::dtype_name(att.type()), model::shape_str(att.shape()), a.B, a.NH, a.T, a.B,
          a.NH, a.T, a.T);
    return true;
  }
  void column_sums(tensor& dbias, const tensor& dout) {
    scratch partial(size_t(k::column_partial_floats(rows_of(dout), cols_of(dout))) * sizeof(float),
                    index_);
    k::column_sums(is_bf16(dout), dbias.f32(), dout.raw(), partial.as<float>(), rows_of(dout),
                   cols_of(dout), s());
  }

  int index_;
  std::string name_;
};

model::backend& backend_of(int index) {
  static std::mutex mu;
  static std::vector<std::unique_ptr<cuda_backend>> all;
  std::lock_guard lock(mu);
  MERAK_CHECK(index >= 0 && index < 64, "CUDA device index {}", index);
  if (all.size() <= size_t(index)) all.resize(size_t(index) + 1);
  if (!all[size_t(index)]) all[size_t(index)] = std::make_unique<cuda_backend>(index);
  return *all[size_t(index)];
}

}  // namespace

void enable_cuda() {
  enable_cuda_memory();
  model::register_backend(model::device::kind::cuda, backend_of);
}

}  // namespace merak::gpu
