#pragma once
// Single-precision GEMM on the host, row-major:
//   C (M, N) = alpha * op(A) (M, K) @ op(B) (K, N) + beta * C
// where op(X) is X or X^T as trans_a / trans_b say, and lda/ldb/ldc are
// row strides in elements.
//
// The backend is chosen once per process (set_gemm_backend); oneDNN is the
// default where it was found at build time because it dispatches to AVX-512
// kernels and measured fastest on the GPT shapes (bench/gemm_bench.cpp).
// Called from inside an OpenMP parallel region, each call runs on the
// calling thread only; outside one, it uses the OpenMP thread count.

#include <string>
#include <string_view>
#include <vector>

#include "model/bf16.hpp"

namespace merak::model {

enum class gemm_backend { onednn, openblas, eigen };

// Backends compiled into this build, fastest first.
std::vector<gemm_backend> available_gemm_backends();
std::string_view gemm_backend_name(gemm_backend b);
// Parses "onednn", "openblas", "eigen"; throws merak::error otherwise or if
// that backend was not compiled in.
gemm_backend parse_gemm_backend(std::string_view name);

void set_gemm_backend(gemm_backend b);
gemm_backend current_gemm_backend();

// Sets the number of compute threads for GEMM and all CPU kernels.
void set_compute_threads(int n);
int compute_threads();

void sgemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda,
           const float* B, int ldb, float beta, float* C, int ldc);

// The same with bf16 inputs, float accumulation and a float C. Runs on
// oneDNN's bf16 kernels (AMX or AVX512-BF16 where the CPU has them, its own
// emulation on other AVX-512 CPUs); elsewhere, or with another backend
// chosen, the inputs are widened and go through sgemm (same contract).
void gemm_bf16(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const bf16* A, int lda,
               const bf16* B, int ldb, float beta, float* C, int ldc);

}  // namespace merak::model
