#include "model/gemm.hpp"

#include <omp.h>

#include <Eigen/Core>
#include <algorithm>
#include <atomic>
#include <vector>

#include "core/error.hpp"

#ifdef MERAK_HAVE_ONEDNN
#include <dnnl.h>
// oneDNN exports its bf16 GEMM with dnnl_sgemm's contract (row-major,
// 'N'/'T') and bf16 A and B, but does not declare it in its public header.
extern "C" dnnl_status_t dnnl_gemm_bf16bf16f32(char transa, char transb, dnnl_dim_t M, dnnl_dim_t N,
                                               dnnl_dim_t K, float alpha,
                                               const merak::model::bf16* A, dnnl_dim_t lda,
                                               const merak::model::bf16* B, dnnl_dim_t ldb,
                                               float beta, float* C, dnnl_dim_t ldc);
#endif
#ifdef MERAK_HAVE_OPENBLAS
#include <cblas.h>
extern "C" void openblas_set_num_threads(int);
#endif

namespace merak::model {
namespace {

gemm_backend default_backend() {
  return available_gemm_backends().front();
}

std::atomic<gemm_backend> g_backend{default_backend()};

// oneDNN splits a GEMM by omp_get_max_threads() and relies on a team that
// large; under OMP_THREAD_LIMIT below that count the team is smaller and
// part of the output is never computed. Each calling thread's count is
// therefore kept within the limit (an ICV of the calling thread; two calls).
void keep_within_thread_limit() {
  const int limit = omp_get_thread_limit();
  if (omp_get_max_threads() > limit) omp_set_num_threads(limit);
}

void eigen_sgemm(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda,
                 const float* B, int ldb, float beta, float* C, int ldc) {
  using mat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using stride = Eigen::OuterStride<>;
  Eigen::Map<mat, 0, stride> c(C, M, N, stride(ldc));
  Eigen::Map<const mat, 0, stride> a(A, ta ? K : M, ta ? M : K, stride(lda));
  Eigen::Map<const mat, 0, stride> b(B, tb ? N : K, tb ? K : N, stride(ldb));
  if (beta == 0.f)
    c.setZero();
  else if (beta != 1.f)
    c *= beta;
  if (!ta && !tb)
    c.noalias() += alpha * a * b;
  else if (!ta && tb)
    c.noalias() += alpha * a * b.transpose();
  else if (ta && !tb)
    c.noalias() += alpha * a.transpose() * b;
  else
    c.noalias() += alpha * a.transpose() * b.transpose();
}

}  // namespace

std::vector<gemm_backend> available_gemm_backends() {
  std::vector<gemm_backend> v;
#ifdef MERAK_HAVE_ONEDNN
  v.push_back(gemm_backend::onednn);
#endif
#ifdef MERAK_HAVE_OPENBLAS
  v.push_back(gemm_backend::openblas);
#endif
  v.push_back(gemm_backend::eigen);
  return v;
}

std::string_view gemm_backend_name(gemm_backend b) {
  switch (b) {
    case gemm_backend::onednn:
      return "onednn";
    case gemm_backend::openblas:
      return "openblas";
    case gemm_backend::eigen:
      return "eigen";
  }
  return "?";
}

gemm_backend parse_gemm_backend(std::string_view name) {
  for (auto b : available_gemm_backends())
    if (gemm_backend_name(b) == name) return b;
  fail("unknown or unavailable GEMM backend '{}' (this build has: {})", name, [] {
    std::string s;
    for (auto b : available_gemm_backends())
      s += (s.empty() ? "" : ", ") + std::string(gemm_backend_name(b));
    return s;
  }());
}

void set_gemm_backend(gemm_backend b) {
  g_backend = b;
}
gemm_backend current_gemm_backend() {
  return g_backend;
}

void set_compute_threads(int n) {
  if (n < 1) fail("--threads must be at least 1 (got {})", n);
  omp_set_num_threads(std::min(n, omp_get_thread_limit()));
#ifdef MERAK_HAVE_OPENBLAS
  openblas_set_num_threads(n);
#endif
}

int compute_threads() {
  return omp_get_max_threads();
}

void sgemm(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda,
           const float* B, int ldb, float beta, float* C, int ldc) {
  if (M == 0 || N == 0) return;
  switch (g_backend.load(std::memory_order_relaxed)) {
#ifdef MERAK_HAVE_ONEDNN
    case gemm_backend::onednn: {
      keep_within_thread_limit();
      auto st =
          dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
      MERAK_CHECK(st == dnnl_success, "dnnl_sgemm({}x{}x{}) returned {}", M, N, K, int(st));
      return;
    }
#endif
#ifdef MERAK_HAVE_OPENBLAS
    case gemm_backend::openblas:
      cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M,
                  N, K, alpha, A, lda, B, ldb, beta, C, ldc);
      return;
#endif
    default:
      eigen_sgemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  }
}

namespace {

// A row-major (rows, cols) block with row stride ld, widened to a dense
// float copy (row stride cols).
std::vector<float> widen(const bf16* x, int rows, int cols, int ld) {
  std::vector<float> w(size_t(rows) * size_t(cols));
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) w[size_t(r) * cols + c] = to_f32(x[int64_t(r) * ld + c]);
  return w;
}

}  // namespace

void gemm_bf16(bool ta, bool tb, int M, int N, int K, float alpha, const bf16* A, int lda,
               const bf16* B, int ldb, float beta, float* C, int ldc) {
  if (M == 0 || N == 0) return;
#ifdef MERAK_HAVE_ONEDNN
  if (g_backend.load(std::memory_order_relaxed) == gemm_backend::onednn) {
    keep_within_thread_limit();
    auto st = dnnl_gemm_bf16bf16f32(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb,
                                    beta, C, ldc);
    if (st == dnnl_success) return;
    MERAK_CHECK(st == dnnl_unimplemented, "dnnl_gemm_bf16bf16f32({}x{}x{}) returned {}", M, N, K,
                int(st));
  }
#endif
  const int ar = ta ? K : M, ac = ta ? M : K, br = tb ? N : K, bc = tb ? K : N;
  auto a = widen(A, ar, ac, lda);
  auto b = widen(B, br, bc, ldb);
  sgemm(ta, tb, M, N, K, alpha, a.data(), ac, b.data(), bc, beta, C, ldc);
}

}  // namespace merak::model
