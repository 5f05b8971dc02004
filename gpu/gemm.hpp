#pragma once
// GEMMs on the device through cuBLASLt, in the row-major terms of the
// model's linear layer (model/kernels/kernels.hpp, matmul):
//   forward  out (N,OC)   = in (N,C) @ weight^T          (+ beta out)
//   dinput   din (N,C)   += dout (N,OC) @ weight (OC,C)
//   dweight  dw (OC,C)   += dout^T @ in                  (float output)
// bf16 operands multiply with float accumulation; float operands use TF32
// tensor cores unless `exact` is set (full float: the tests' reference
// mode). Descriptors and the chosen algorithm are cached per shape.
// Included by gpu/ only.

#include <cuda_runtime_api.h>

#include <cstdint>

#include "gpu/cuda_backend.hpp"

namespace merak::gpu {

// C (m x n, column-major, ldc) = alpha op(A) op(B) + beta C, with op(A)
// m x k and op(B) k x n in cuBLAS's column-major terms. a_type/c_type: bf16
// (true) or float operands; C may be float with bf16 A and B.
void gemm(int device, bool ab_bf16, bool c_bf16, bool trans_a, bool trans_b, int m, int n, int k,
          float alpha, const void* A, int lda, const void* B, int ldb, float beta, void* C, int ldc,
          cudaStream_t s);

// `batch` GEMMs as above in one call: matrix i of A, B and C starts
// stride_a, stride_b and stride_c elements after matrix i - 1.
void gemm_batched(int device, bool ab_bf16, bool c_bf16, bool trans_a, bool trans_b, int m, int n,
                  int k, float alpha, const void* A, int lda, int64_t stride_a, const void* B,
                  int ldb, int64_t stride_b, float beta, void* C, int ldc, int64_t stride_c,
                  int batch, cudaStream_t s);

}  // namespace merak::gpu
