#pragma once
// The compute backend: the model's operations on the tensors of one device.
//
// Layers (layers.cpp) call these operations, never kernels directly; a
// backend dispatches on the tensors' element types (float, or bf16
// activations with float statistics and parameter gradients, as
// kernels/kernels.hpp states per kernel). The CPU backend (cpu_backend.cpp)
// is the oracle every other backend is tested against; another device adds
// a backend behind this interface rather than editing the layers.
//
// Shapes are those of kernels.hpp with the sizes read from the tensors:
// activations (B, T, features); N = B * T rows. Every backward accumulates
// (+=) into its gradient outputs. A backend is used by one thread at a time
// per executor and keeps no state between calls that callers can observe.

#include <string_view>

#include "core/error.hpp"
#include "model/tensor.hpp"

namespace merak::model {

class backend {
 public:
  virtual ~backend() = default;
  virtual std::string_view name() const = 0;

  // out (B,T,C) = wte[tokens] + wpe[t]; wte (V,C), wpe (max_T,C) float.
  virtual void encoder_forward(tensor& out, const tensor& tokens, const tensor& wte,
                               const tensor& wpe) = 0;
  virtual void encoder_backward(tensor& dwte, tensor& dwpe, const tensor& dout,
                                const tensor& tokens) = 0;
  // mean, rstd (N) float.
  virtual void layernorm_forward(tensor& out, tensor& mean, tensor& rstd, const tensor& in,
                                 const tensor& weight, const tensor& bias) = 0;
  virtual void layernorm_backward(tensor& din, tensor& dweight, tensor& dbias, const tensor& dout,
                                  const tensor& in, const tensor& weight, const tensor& mean,
                                  const tensor& rstd) = 0;
  // out = in @ weight^T + bias; `weight` (OC,C) has the activations' type
  // (a bf16 run passes the bf16 copy of the float master weight); bias
  // (OC) float or null. din, dweight, dbias may be null (not computed).
  virtual void matmul_forward(tensor& out, const tensor& in, const tensor& weight,
                              const tensor* bias) = 0;
  virtual void matmul_backward(tensor* din, tensor* dweight, tensor* dbias, const tensor& dout,
                               const tensor& in, const tensor& weight) = 0;
  // qkv (B,T,3C) -> out (B,T,C), `heads` heads; att (B,heads,T,T) stashed,
  // of the activations' type.
  virtual void attention_forward(tensor& out, tensor& att, const tensor& qkv, int heads) = 0;
  virtual void attention_backward(tensor& dqkv, const tensor& dout, const tensor& qkv,
                                  const tensor& att, int heads) = 0;
  virtual void gelu_forward(tensor& out, const tensor& in) = 0;
  virtual void gelu_backward(tensor& din, const tensor& in, const tensor& dout) = 0;
  // out = a + b; backward: da += dout, db += dout.
  virtual void residual_forward(tensor& out, const tensor& a, const tensor& b) = 0;
  virtual void residual_backward(tensor& da, tensor& db, const tensor& dout) = 0;
  // out = in + bias (per feature); backward: dbias += column sums, din +=
  // dout (din may be null).
  virtual void bias_forward(tensor& out, const tensor& in, const tensor& bias) = 0;
  virtual void bias_backward(tensor* din, tensor& dbias, const tensor& dout) = 0;
  // dst = src, converting the element type (float <-> bf16) if they differ.
  virtual void copy(tensor& dst, const tensor& src) = 0;
  // dst += src (same shape; types may differ: the sum is formed in float).
  virtual void accumulate(tensor& dst, const tensor& src) = 0;
  // losses (B,T) float = -log softmax(logits)[target] over the first
  // `valid` columns of the V (the rest: padding, left out); probs (N,V)
  // float, zero past `valid`.
  virtual void crossentropy_forward(tensor& losses, tensor& probs, const tensor& logits,
                                    const tensor& targets, int valid) = 0;
  virtual void crossentropy_backward(tensor& dlogits, const tensor& dlosses, const tensor& probs,
                                     const tensor& targets) = 0;

  // The Llama family's operations (kernels.hpp states each formula). A
  // backend that lacks one inherits a default that throws merak::error
  // naming the operation and the backend.
  //
  // RMSNorm: rstd (N) float; weight (C) float; eps added to the mean square.
  virtual void rmsnorm_forward(tensor& out, tensor& rstd, const tensor& in, const tensor& weight,
                               float eps) {
    not_implemented("rmsnorm");
  }
  virtual void rmsnorm_backward(tensor& din, tensor& dweight, const tensor& dout, const tensor& in,
                                const tensor& weight, const tensor& rstd) {
    not_implemented("rmsnorm backward");
  }
  // Rotary embedding of in (B,T,W) into out (same shape, may alias in): the
  // first `rotated_heads` heads of `head_size` channels rotated at positions
  // position_offset + t, the other channels copied.
  virtual void rope_forward(tensor& out, const tensor& in, int rotated_heads, int head_size,
                            float theta, int position_offset) {
    not_implemented("rope");
  }
  virtual void rope_backward(tensor& din, const tensor& dout, int rotated_heads, int head_size,
                             float theta, int position_offset) {
    not_implemented("rope backward");
  }
  // in (B,T,2F) = [gate | up] -> out (B,T,F) = silu(gate) * up.
  virtual void swiglu_forward(tensor& out, const tensor& in) { not_implemented("swiglu"); }
  virtual void swiglu_backward(tensor& din, const tensor& in, const tensor& dout) {
    not_implemented("swiglu backward");
  }
  // What attention stashes between forward and backward (the `att` of the
  // four attention operations): by default the probabilities (B,heads,T,T)
  // of the activations' type; a backend with a fused kernel may ask for
  // less (its own shape and type, which only it reads).
  struct attention_stash {
    shape_t shape;
    dtype type;
  };
  virtual attention_stash attention_stash_for(int B, int heads, int T, int head_size,
                                              dtype activations) {
    return {{B, heads, T, T}, activations};
  }
  // Grouped-query attention: qkv (B,T,C+2*groups*C/heads) -> out (B,T,C),
  // `groups` K/V heads dividing `heads`. groups == heads is
  // attention_forward/backward above, which the default runs; other group
  // counts need the backend's own kernels.
  virtual void gqa_attention_forward(tensor& out, tensor& att, const tensor& qkv, int heads,
                                     int groups) {
    if (groups != heads) not_implemented("grouped-query attention");
    attention_forward(out, att, qkv, heads);
  }
  virtual void gqa_attention_backward(tensor& dqkv, const tensor& dout, const tensor& qkv,
                                      const tensor& att, int heads, int groups) {
    if (groups != heads) not_implemented("grouped-query attention backward");
    attention_backward(dqkv, dout, qkv, att, heads);
  }

  // Vocabulary parallelism (kernels.hpp states each formula): a shard
  // holds rows [first, first + rows(wte)) of the token embedding and of the
  // output layer. wpe may be null (no positions added / no gradient).
  virtual void embedding_shard_forward(tensor& out, const tensor& tokens, const tensor& wte,
                                       const tensor* wpe, int first) {
    not_implemented("vocabulary-parallel embedding");
  }
  virtual void embedding_shard_backward(tensor& dwte, tensor* dwpe, const tensor& dout,
                                        const tensor& tokens, int first) {
    not_implemented("vocabulary-parallel embedding backward");
  }
  // stats (B,T,2 parts) float, logits (B,T,Vs).
  virtual void vocab_ce_stats(tensor& stats, const tensor& logits, const tensor& targets,
                              int first, int valid, int part) {
    not_implemented("vocabulary-parallel cross-entropy");
  }
  // losses (B,T) float from the stats summed over the shards.
  virtual void vocab_ce_loss(tensor& losses, const tensor& stats) {
    not_implemented("vocabulary-parallel cross-entropy loss");
  }
  virtual void vocab_ce_backward(tensor& dlogits, const tensor& dlosses, const tensor& logits,
                                 const tensor& stats, const tensor& targets, int first,
                                 int valid) {
    not_implemented("vocabulary-parallel cross-entropy backward");
  }
  // Optimizer-side operations on float tensors (parameters, gradients,
  // AdamW moments), so that they stay on the device.
  // The sum of squares, accumulated in double.
  virtual double sum_squares(const tensor& x) = 0;
  // x *= factor.
  virtual void scale(tensor& x, float factor) = 0;
  // One AdamW update of one parameter (model/adamw.hpp's formula): with
  // g = grad * grad_scale, m = b1 m + (1 - b1) g, v = b2 v + (1 - b2) g^2,
  // value -= lr (m c1 / (sqrt(v c2) + eps) + weight_decay value); the
  // gradient is zeroed afterwards when zero_grad is set.
  struct adamw_args {
    float lr, beta1, beta2, eps, weight_decay, c1, c2, grad_scale;
    bool zero_grad;
  };
  virtual void adamw_update(tensor& value, tensor& grad, tensor& m, tensor& v,
                            const adamw_args& a) = 0;

 protected:
  [[noreturn]] void not_implemented(const char* op) const {
    fail("{}: not implemented on the {} backend", op, name());
  }
};

// Shapes as the backends read them: rows (every dimension but the last)
// and columns (the last); whether the elements are bf16.
inline int rows_of(const tensor& t) {
  return int(t.numel() / t.dim(-1));
}
inline int cols_of(const tensor& t) {
  return int(t.dim(-1));
}
inline bool is_bf16(const tensor& t) {
  return t.type() == dtype::bf16;
}

// The backend of a device; throws merak::error for a device no backend was
// registered for.
backend& backend_for(device d);

// Registers the backends of device kind `k`: `of(index)` returns device
// index's (the CUDA ones: gpu/cuda_backend.hpp). Once, before use.
void register_backend(device::kind k, backend& (*of)(int index));

// Shape checks every backend makes before the Llama operations, failing
// with merak::error naming the shapes: qkv (B,T,C+2*groups*C/heads) with
// groups dividing heads dividing C; a (B,T,W) tensor whose first
// rotated_heads heads of head_size (even) channels fit in W.
void check_attention_groups(const tensor& qkv, int C, int heads, int groups);
void check_rope_shape(const tensor& t, int rotated_heads, int head_size);

}  // namespace merak::model
