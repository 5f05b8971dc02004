#pragma once
// Causal grouped-query attention on the device as batched GEMMs over
// (batch x head) through cuBLASLt, with the probabilities stashed, in the
// shapes of model/backend.hpp's gqa_attention_forward/backward: qkv
// (B,T,C+2*G*C/NH) holds Q (NH heads), K and V (G heads each, G dividing
// NH; G = NH is multi-head attention), out (B,T,C), att (B,NH,T,T) of the
// activations' type, written zero above the diagonal. Scores and their
// gradients are float; bf16 operands multiply with float accumulation.
// Included by gpu/ only.

#include <cuda_runtime_api.h>

namespace merak::gpu {

struct attention_shape {
  int B, T, C, NH, G;
};

void attention_forward(int device, bool bf16, void* out, void* att, const void* qkv,
                       const attention_shape& shape, cudaStream_t s);
// dqkv += the gradient of qkv; only entries of att on or below the diagonal
// are read.
void attention_backward(int device, bool bf16, void* dqkv, const void* dout, const void* qkv,
                        const void* att, const attention_shape& shape, cudaStream_t s);

// The fused path (bf16, head size 64 or 128, when set_fused_attention
// enabled it: fused_attention_supported):
// the forward stashes each row's log-sum-exp, lse (B,NH,T) float, instead
// of the probabilities, and the backward forms them again by one batched
// GEMM before the same steps as above.
bool fused_attention_supported(bool bf16, const attention_shape& shape);
void fused_attention_forward(bool bf16, void* out, float* lse, const void* qkv,
                             const attention_shape& shape, cudaStream_t s);
void fused_attention_backward(int device, bool bf16, void* dqkv, const void* dout, const void* qkv,
                              const float* lse, const attention_shape& shape, cudaStream_t s);

}  // namespace merak::gpu
