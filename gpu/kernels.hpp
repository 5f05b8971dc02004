#pragma once
// CUDA kernels of the GPT family (kernels.cu): the operations of
// model/backend.hpp on device memory, with model/kernels/kernels.hpp's
// shapes and conventions (outputs first; every backward accumulates).
// Activations are float or bf16 (`bf16` true), computed in float;
// statistics, probabilities, losses and parameter gradients are float.
// Each launches on `s` and returns at once. Included by gpu/ only.

#include <cuda_runtime_api.h>

#include <cstdint>

namespace merak::gpu::kernels {

// out (B,T,C) = wte[tokens] + wpe[t]; tokens must be in [0, V).
void encoder_forward(bool bf16, void* out, const int32_t* tokens, const float* wte,
                     const float* wpe, int B, int T, int C, cudaStream_t s);
// dwte += scatter(dout) (atomic adds: the order of a token's rows varies),
// dwpe += sum over the batch.
void encoder_backward(bool bf16, float* dwte, float* dwpe, const void* dout, const int32_t* tokens,
                      int B, int T, int C, cudaStream_t s);

// One warp per row; eps 1e-5 as the CPU kernel.
void layernorm_forward(bool bf16, void* out, float* mean, float* rstd, const void* in,
                       const float* weight, const float* bias, int N, int C, cudaStream_t s);
// dweight, dbias: column sums in a fixed order (deterministic). `partial`
// holds layernorm_partial_floats(N, C) floats.
void layernorm_backward(bool bf16, void* din, float* dweight, float* dbias, const void* dout,
                        const void* in, const float* weight, const float* mean, const float* rstd,
                        float* partial, int N, int C, cudaStream_t s);
int64_t layernorm_partial_floats(int N, int C);

// out (N,C) = in + bias; in-place (out == in) allowed.
void bias_forward(bool bf16, void* out, const void* in, const float* bias, int N, int C,
                  cudaStream_t s);
// dbias (C) += column sums of dout (N,C), in a fixed order; `partial` holds
// column_partial_floats(N, C) floats.
void column_sums(bool bf16, float* dbias, const void* dout, float* partial, int N, int C,
                 cudaStream_t s);
int64_t column_partial_floats(int N, int C);

// The pieces of causal (grouped-query) attention around its batched GEMMs
// (cuda_backend.cpp): per-head copies (B,NH,T,hs) of slices of (B,T,W)
// rows, the causal softmax of score rows and its backward. Rows of qkv hold
// Q (NH heads), K (G heads) and V (G heads) of hs channels; query head h
// uses group h / rep, rep = NH / G.
//
// dst[b][h][t][d] = src[b][t][offset + (h / rep) hs + d].
void gather_heads(bool bf16, void* dst, const void* src, int B, int T, int64_t W, int64_t offset,
                  int NH, int hs, int rep, cudaStream_t s);
// out (B,T,NH hs)[b][t][h hs + d] = o[b][h][t][d].
void scatter_heads(bool bf16, void* out, const void* o, int B, int T, int NH, int hs,
                   cudaStream_t s);
// dst[b][t][offset + g hs + d] += sum over h in group g of src[b][h][t][d]
// (float src, summed in head order).
void scatter_add_heads(bool bf16, void* dst, const float* src, int B, int T, int64_t W,
                       int64_t offset, int NH, int hs, int rep, cudaStream_t s);
// att rows (rows = B NH T rows of T) = softmax over j <= i of scale *
// scores (float), zero above the diagonal.
void causal_softmax(bool bf16, void* att, const float* scores, float scale, int64_t rows, int T,
                    cudaStream_t s);
// ds = scale P (dp - rowsum(P dp)) and p_clean = P, both zero above the
// diagonal whatever att holds there; dp float.
void causal_softmax_backward(bool bf16, void* ds, void* p_clean, const float* dp, const void* att,
                             float scale, int64_t rows, int T, cudaStream_t s);

// Fused causal attention forward (flash_attention.cu) for bf16 activations
// and head sizes 64 and 128 (flash_attention_supported): out (B,T,C) and
// lse (B,NH,T) float, each row's log-sum-exp of its scaled scores, from qkv
// laid out as above; no (T,T) matrix is formed.
bool flash_attention_supported(bool bf16, int head_size);
void flash_attention_forward(void* out, float* lse, const void* qkv, int B, int T, int C, int NH,
                             int G, cudaStream_t s);
// p (rows of T) = exp(scale scores - lse[row]) on and below the diagonal,
// zero above: the probabilities again from the fused forward's stash.
void causal_probabilities(bool bf16, void* p, const float* scores, const float* lse, float scale,
                          int64_t rows, int T, cudaStream_t s);

// The Llama family's operations (llama_kernels.cu), as model/kernels/kernels.hpp
// states them. RMSNorm: rstd (N) float; `partial` holds
// layernorm_partial_floats(N, C) floats; dweight summed in a fixed order.
void rmsnorm_forward(bool bf16, void* out, float* rstd, const void* in, const float* weight,
                     float eps, int N, int C, cudaStream_t s);
void rmsnorm_backward(bool bf16, void* din, float* dweight, const void* dout, const void* in,
                      const float* weight, const float* rstd, float* partial, int N, int C,
                      cudaStream_t s);
// Rotary embedding, rotate-half layout, rows of CR channels (B,T,CR): the
// first RH heads of hs channels rotated at positions pos_offset + t, the
// rest copied; out may alias in. Backward accumulates the inverse rotation.
void rope_forward(bool bf16, void* out, const void* in, int B, int T, int CR, int RH, int hs,
                  float theta, int pos_offset, cudaStream_t s);
void rope_backward(bool bf16, void* din, const void* dout, int B, int T, int CR, int RH, int hs,
                   float theta, int pos_offset, cudaStream_t s);
// SwiGLU: in (N,2F) rows [gate | up] -> out (N,F); backward accumulates.
void swiglu_forward(bool bf16, void* out, const void* in, int N, int F, cudaStream_t s);
void swiglu_backward(bool bf16, void* din, const void* in, const void* dout, int N, int F,
                     cudaStream_t s);

void gelu_forward(bool bf16, void* out, const void* in, int64_t n, cudaStream_t s);
void gelu_backward(bool bf16, void* din, const void* in, const void* dout, int64_t n,
                   cudaStream_t s);
void residual_forward(bool bf16, void* out, const void* a, const void* b, int64_t n,
                      cudaStream_t s);
// da += dout; db += dout.
void residual_backward(bool bf16, void* da, void* db, const void* dout, int64_t n, cudaStream_t s);
// dst = src, or dst += src (accumulate), converting between float and bf16.
void convert(bool dst_bf16, void* dst, bool src_bf16, const void* src, int64_t n, bool accumulate,
             cudaStream_t s);

// losses (N) = -log softmax(logits)[target] over the first `valid` of the V
// columns; probs (N,V) float, zero past `valid`.
void crossentropy_forward(bool bf16, float* losses, float* probs, const void* logits,
                          const int32_t* targets, int N, int V, int valid, cudaStream_t s);
// dlogits += (probs - onehot(target)) * dlosses[n].
void crossentropy_backward(bool bf16, void* dlogits, const float* dlosses, const float* probs,
                           const int32_t* targets, int N, int V, cudaStream_t s);

// Vocabulary parallelism (model/kernels/kernels.hpp states each formula):
// a shard holds rows [first, first + rows) of the token embedding and of
// the output layer. wpe / dwpe may be null.
void embedding_shard_forward(bool bf16, void* out, const int32_t* tokens, const float* wte,
                             const float* wpe, int B, int T, int C, int first, int rows,
                             cudaStream_t s);
void embedding_shard_backward(bool bf16, float* dwte, float* dwpe, const void* dout,
                              const int32_t* tokens, int B, int T, int C, int first, int rows,
                              cudaStream_t s);
void vocab_ce_stats(bool bf16, float* stats, const void* logits, const int32_t* targets, int N,
                    int Vs, int first, int valid, int part, int parts, cudaStream_t s);
void vocab_ce_loss(float* losses, const float* stats, int N, int parts, cudaStream_t s);
void vocab_ce_backward(bool bf16, void* dlogits, const float* dlosses, const void* logits,
                       const float* stats, const int32_t* targets, int N, int Vs, int first,
                       int valid, int parts, cudaStream_t s);

// Optimizer side, float tensors of n elements.
// partial[b] = the sum of squares of block b's share (double), for
// sum_squares_blocks(n) blocks; the caller adds them in order.
void sum_squares(double* partial, const float* x, int64_t n, cudaStream_t s);
int sum_squares_blocks(int64_t n);
void scale(float* x, float factor, int64_t n, cudaStream_t s);
// AdamW as model/backend.hpp states it.
void adamw(float* w, float* g, float* m, float* v, int64_t n, float lr, float b1, float b2,
           float eps, float wd, float c1, float c2, float grad_scale, bool zero_grad,
           cudaStream_t s);

}  // namespace merak::gpu::kernels
