#pragma once
// CPU kernels of the GPT and Llama families, as forward/backward pairs (the oracle for
// any other backend).
//
// Conventions (llm.c's): arguments are outputs, then inputs, then sizes.
// Sizes: B batch, T sequence, C channels, NH heads, G key/value groups, hs
// head size, F feed-forward channels, V vocabulary, OC output channels,
// N = B*T rows. Every backward *accumulates* (+=) into its gradient
// outputs, so a value used twice (residual stream, tied weights) sums its
// gradients without extra passes; callers zero gradients before the first
// contribution. All kernels use the OpenMP thread count and are deterministic
// for a fixed thread count (reductions run in a fixed order).
//
// Mixed precision: each kernel also comes with bf16 activations (inputs,
// outputs and their gradients), computing in float: statistics (layer-norm
// mean and rstd), softmax probabilities of the loss, losses and parameter
// gradients stay float; parameters are the float master weights, except
// the GEMM weight of matmul, which is the bf16 copy the GEMM reads.

#include <cstdint>

#include "model/bf16.hpp"

namespace merak::model::kernels {

// out (B,T,C) = wte[tokens] + wpe[t]. tokens (B,T) must be in [0, V).
void encoder_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int B,
                     int T, int C);
// dwte (V,C) += scatter(dout), dwpe (T,C) += sum_b dout.
void encoder_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int B,
                      int T, int C, int V);

// out (N,C) = (inp - mean) * rstd * weight + bias; mean, rstd (N) stashed.
void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int N, int C);
void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, const float* mean, const float* rstd,
                        int N, int C);

// out (N,OC) = inp (N,C) @ weight^T (OC,C) + bias (OC); bias may be null.
void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int N,
                    int C, int OC);
// dinp (N,C) += dout @ weight; dweight (OC,C) += dout^T @ inp; dbias (OC) +=
// column sums of dout. Any of dinp, dweight, dbias may be null (not needed).
void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int N, int C, int OC);

// Causal multi-head self-attention.
// qkv (B,T,3C) holds Q, K, V side by side, heads of size C/NH within each.
// out (B,T,C); att (B,NH,T,T) the softmax probabilities (stashed; entries
// above the diagonal are left unwritten and never read).
void attention_forward(float* out, float* att, const float* qkv, int B, int T, int C, int NH);
// dqkv (B,T,3C) +=. scratch must hold attention_scratch_floats(T) floats per
// OpenMP thread (compute_threads() * that).
void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* att,
                        float* scratch, int B, int T, int C, int NH);
int64_t attention_scratch_floats(int T);
// Grouped-query causal attention (multi-query: G = 1; the above: G = NH).
// qkv (B,T,C+2*G*hs) holds Q (NH heads), K (G heads), V (G heads) side by
// side, hs = C/NH; query head h attends with K/V group h / (NH/G). G must
// divide NH. out (B,T,C), att (B,NH,T,T) as above; scratch as above.
void attention_forward(float* out, float* att, const float* qkv, int B, int T, int C, int NH,
                       int G);
void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* att,
                        float* scratch, int B, int T, int C, int NH, int G);

// RMSNorm (Llama/Megatron): out (N,C) = inp * rstd * weight with rstd (N) =
// 1/sqrt(mean(inp^2) + eps), stashed. No bias, no mean subtraction.
void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int N, int C,
                     float eps);
// dinp (N,C) +=, dweight (C) +=.
void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                      const float* weight, const float* rstd, int N, int C);

// Rotary position embedding, rotate-half layout (Hugging Face's): rows of
// CR channels (B,T,CR); in each row the first RH heads of hs channels (hs
// even) are rotated, channel i < hs/2 paired with i + hs/2, by the angle
// (pos_offset + t) * theta^(-2i/hs); channels from RH*hs on are copied.
// out may alias inp.
void rope_forward(float* out, const float* inp, int B, int T, int CR, int RH, int hs, float theta,
                  int pos_offset);
// dinp (B,T,CR) += the inverse rotation of dout (copied channels: += dout).
void rope_backward(float* dinp, const float* dout, int B, int T, int CR, int RH, int hs,
                   float theta, int pos_offset);

// SwiGLU: inp (N,2F) rows [gate | up]; out (N,F) = silu(gate) * up.
void swiglu_forward(float* out, const float* inp, int N, int F);
// dinp (N,2F) += [dout * up * silu'(gate) | dout * silu(gate)].
void swiglu_backward(float* dinp, const float* inp, const float* dout, int N, int F);

// GELU, tanh approximation. out (N) = gelu(inp).
void gelu_forward(float* out, const float* inp, int64_t N);
void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t N);

// out = a + b (N); backward: da += dout, db += dout.
void residual_forward(float* out, const float* a, const float* b, int64_t N);
void residual_backward(float* da, float* db, const float* dout, int64_t N);

// Softmax cross-entropy over the first `valid` columns of logits (N,V)
// (valid < 0: all V; the rest are padding) with targets (N) in [0, valid).
// losses (N) = -log softmax(logits)[target]; probs (N,V) stashed, zero past
// `valid`.
void crossentropy_forward(float* losses, float* probs, const float* logits, const int32_t* targets,
                          int N, int V, int valid = -1);
// dlogits (N,V) += (probs - onehot(target)) * dlosses[n].
void crossentropy_backward(float* dlogits, const float* dlosses, const float* probs,
                           const int32_t* targets, int N, int V);

// Vocabulary parallelism: a shard holds rows [first, first + rows) of the
// token embedding and of the output layer.
// out (B,T,C) = wte[token - first] for the tokens held, 0 for the others,
// plus wpe[t] when wpe is not null.
void embedding_shard_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe,
                             int B, int T, int C, int first, int rows);
// dwte[token - first] += dout for the tokens held; dwpe (when not null) +=
// dout at every position.
void embedding_shard_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens,
                              int B, int T, int C, int first, int rows);
// The shard's part of the loss over logits (N,Vs) of ids [first, first + Vs),
// of which those below `valid` count: stats (N, 2 parts) zero except
// columns 2 part (the log-sum-exp of the counted logits, -inf when none
// count) and 2 part + 1 (the target's logit when this shard holds it,
// else 0). Summed over the shards, the stats hold every shard's pair.
void vocab_ce_stats(float* stats, const float* logits, const int32_t* targets, int N, int Vs,
                    int first, int valid, int part, int parts);
// losses (N) = log sum_k exp(stats[2k]) - sum_k stats[2k + 1] (summed stats).
void vocab_ce_loss(float* losses, const float* stats, int N, int parts);
// dlogits (N,Vs) += (softmax - onehot(target)) * dlosses over the shard's
// counted columns, the softmax's normaliser from the summed stats.
void vocab_ce_backward(float* dlogits, const float* dlosses, const float* logits,
                       const float* stats, const int32_t* targets, int N, int Vs, int first,
                       int valid, int parts);

// bf16 activations (see the header comment).
void encoder_forward(bf16* out, const int32_t* tokens, const float* wte, const float* wpe, int B,
                     int T, int C);
void encoder_backward(float* dwte, float* dwpe, const bf16* dout, const int32_t* tokens, int B,
                      int T, int C, int V);
void layernorm_forward(bf16* out, float* mean, float* rstd, const bf16* inp, const float* weight,
                       const float* bias, int N, int C);
void layernorm_backward(bf16* dinp, float* dweight, float* dbias, const bf16* dout, const bf16* inp,
                        const float* weight, const float* mean, const float* rstd, int N, int C);
void matmul_forward(bf16* out, const bf16* inp, const bf16* weight, const float* bias, int N, int C,
                    int OC);
void matmul_backward(bf16* dinp, float* dweight, float* dbias, const bf16* dout, const bf16* inp,
                     const bf16* weight, int N, int C, int OC);
// att (B,NH,T,T) in bf16; no scratch argument (per-thread buffers inside).
void attention_forward(bf16* out, bf16* att, const bf16* qkv, int B, int T, int C, int NH);
void attention_backward(bf16* dqkv, const bf16* dout, const bf16* qkv, const bf16* att, int B,
                        int T, int C, int NH);
void attention_forward(bf16* out, bf16* att, const bf16* qkv, int B, int T, int C, int NH, int G);
void attention_backward(bf16* dqkv, const bf16* dout, const bf16* qkv, const bf16* att, int B,
                        int T, int C, int NH, int G);
void rmsnorm_forward(bf16* out, float* rstd, const bf16* inp, const float* weight, int N, int C,
                     float eps);
void rmsnorm_backward(bf16* dinp, float* dweight, const bf16* dout, const bf16* inp,
                      const float* weight, const float* rstd, int N, int C);
void rope_forward(bf16* out, const bf16* inp, int B, int T, int CR, int RH, int hs, float theta,
                  int pos_offset);
void rope_backward(bf16* dinp, const bf16* dout, int B, int T, int CR, int RH, int hs, float theta,
                   int pos_offset);
void swiglu_forward(bf16* out, const bf16* inp, int N, int F);
void swiglu_backward(bf16* dinp, const bf16* inp, const bf16* dout, int N, int F);
void gelu_forward(bf16* out, const bf16* inp, int64_t N);
void gelu_backward(bf16* dinp, const bf16* inp, const bf16* dout, int64_t N);
void residual_forward(bf16* out, const bf16* a, const bf16* b, int64_t N);
void residual_backward(bf16* da, bf16* db, const bf16* dout, int64_t N);
void crossentropy_forward(float* losses, float* probs, const bf16* logits, const int32_t* targets,
                          int N, int V, int valid = -1);
void crossentropy_backward(bf16* dlogits, const float* dlosses, const float* probs,
                           const int32_t* targets, int N, int V);
void embedding_shard_forward(bf16* out, const int32_t* tokens, const float* wte, const float* wpe,
                             int B, int T, int C, int first, int rows);
void embedding_shard_backward(float* dwte, float* dwpe, const bf16* dout, const int32_t* tokens,
                              int B, int T, int C, int first, int rows);
void vocab_ce_stats(float* stats, const bf16* logits, const int32_t* targets, int N, int Vs,
                    int first, int valid, int part, int parts);
void vocab_ce_backward(bf16* dlogits, const float* dlosses, const bf16* logits, const float* stats,
                       const int32_t* targets, int N, int Vs, int first, int valid, int parts);

}  // namespace merak::model::kernels
