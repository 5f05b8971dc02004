#include "gpu/gemm.hpp"

#include <cublasLt.h>

#include <atomic>
#include <map>
#include <mutex>
#include <tuple>

#include <fmt/format.h>

#include "gpu/cuda_util.hpp"

namespace merak::gpu {
namespace {

void check_lt(cublasStatus_t st, const char* what) {
  if (st != CUBLAS_STATUS_SUCCESS) fail("{}: cuBLASLt status {}", what, int(st));
}
#define MERAK_LT(call) check_lt((call), #call)

std::atomic<gemm_math> float_math{gemm_math::tf32};

// Enough for the split-K and stream-K algorithms cuBLASLt picks on Hopper.
constexpr size_t kworkspace = size_t(32) << 20;

// Operand types, transposes, m n k, leading dimensions, beta != 0, the float
// math, then the batch: count and the three strides.
using shape_key = std::tuple<bool, bool, bool, bool, int, int, int, int, int, int, bool, int, int,
                             int64_t, int64_t, int64_t>;

// A strided batch: `count` matrices, each `stride` elements after the last.
struct batch_shape {
  int count = 1;
  int64_t stride_a = 0, stride_b = 0, stride_c = 0;
};

void set_batch(cublasLtMatrixLayout_t layout, int count, int64_t stride) {
  MERAK_LT(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count,
                                            sizeof count));
  MERAK_LT(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                            &stride, sizeof stride));
}

struct cached_gemm {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool has_algo = false;
};

// One per device: its handle, workspace and the plans of the shapes seen.
struct device_gemms {
  std::mutex mu;
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
  std::map<shape_key, cached_gemm> plans;
};

device_gemms& gemms_of(int device) {
  static std::mutex mu;
  static std::map<int, device_gemms> all;
  std::lock_guard lock(mu);
  auto& g = all[device];
  if (!g.handle) {
    select_device(device);
    MERAK_LT(cublasLtCreate(&g.handle));
    MERAK_CUDA(cudaMalloc(&g.workspace, kworkspace));
  }
  return g;
}

cached_gemm make_plan(cublasLtHandle_t h, bool ab_bf16, bool c_bf16, bool ta, bool tb, int m, int n,
                      int k, int lda, int ldb, int ldc, bool beta_nonzero, gemm_math math,
                      const batch_shape& batch) {
  cached_gemm p;
  const cublasComputeType_t compute =
      ab_bf16 || math == gemm_math::exact ? CUBLAS_COMPUTE_32F : CUBLAS_COMPUTE_32F_FAST_TF32;
  MERAK_LT(cublasLtMatmulDescCreate(&p.desc, compute, CUDA_R_32F));
  cublasOperation_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  MERAK_LT(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa));
  MERAK_LT(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb));
  const cudaDataType_t ab = ab_bf16 ? CUDA_R_16BF : CUDA_R_32F,
                       ct = c_bf16 ? CUDA_R_16BF : CUDA_R_32F;
  // Stored shapes (before op): A is m x k, or k x m when transposed.
  MERAK_LT(cublasLtMatrixLayoutCreate(&p.a, ab, ta ? k : m, ta ? m : k, lda));
  MERAK_LT(cublasLtMatrixLayoutCreate(&p.b, ab, tb ? n : k, tb ? k : n, ldb));
  MERAK_LT(cublasLtMatrixLayoutCreate(&p.c, ct, m, n, ldc));
  if (batch.count > 1) {
    set_batch(p.a, batch.count, batch.stride_a);
    set_batch(p.b, batch.count, batch.stride_b);
    set_batch(p.c, batch.count, batch.stride_c);
  }
  cublasLtMatmulPreference_t pref;
  MERAK_LT(cublasLtMatmulPreferenceCreate(&pref));
  size_t ws = kworkspace;
  MERAK_LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                                sizeof ws));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  MERAK_LT(cublasLtMatmulAlgoGetHeuristic(h, p.desc, p.a, p.b, p.c, p.c, pref, 1, &result, &found));
  cublasLtMatmulPreferenceDestroy(pref);
  if (found < 1)
    fail("cuBLASLt has no algorithm for a {}x{}x{} GEMM ({} operands, {} result{})", m, n, k,
         ab_bf16 ? "bf16" : "float", c_bf16 ? "bf16" : "float",
         beta_nonzero ? ", accumulating" : "");
  p.algo = result.algo;
  p.has_algo = true;
  return p;
}

}  // namespace

void set_float_gemm_math(gemm_math m) {
  float_math.store(m);
}

void gemm(int device, bool ab_bf16, bool c_bf16, bool trans_a, bool trans_b, int m, int n, int k,
          float alpha, const void* A, int lda, const void* B, int ldb, float beta, void* C, int ldc,
          cudaStream_t s) {
  gemm_batched(device, ab_bf16, c_bf16, trans_a, trans_b, m, n, k, alpha, A, lda, 0, B, ldb, 0,
               beta, C, ldc, 0, 1, s);
}

void gemm_batched(int device, bool ab_bf16, bool c_bf16, bool trans_a, bool trans_b, int m, int n,
                  int k, float alpha, const void* A, int lda, int64_t stride_a, const void* B,
                  int ldb, int64_t stride_b, float beta, void* C, int ldc, int64_t stride_c,
                  int batch, cudaStream_t s) {
  if (m == 0 || n == 0 || batch == 0) return;
  auto& g = gemms_of(device);
  const gemm_math math = float_math.load();
  const batch_shape shape =
      batch > 1 ? batch_shape{batch, stride_a, stride_b, stride_c} : batch_shape{};
  const shape_key key{ab_bf16,
                      c_bf16,
                      trans_a,
                      trans_b,
                      m,
                      n,
                      k,
                      lda,
                      ldb,
                      ldc,
                      beta != 0.f,
                      int(math),
                      shape.count,
                      shape.stride_a,
                      shape.stride_b,
                      shape.stride_c};
  // One caller at a time per device: the handle, the plans and the
  // workspace are shared by the device's actors (whose work is ordered on
  // one stream anyway).
  std::lock_guard lock(g.mu);
  auto it = g.plans.find(key);
  if (it == g.plans.end())
    it = g.plans
             .emplace(key, make_plan(g.handle, ab_bf16, c_bf16, trans_a, trans_b, m, n, k, lda, ldb,
                                     ldc, beta != 0.f, math, shape))
             .first;
  cached_gemm* p = &it->second;
  select_device(device);
  MERAK_LT(cublasLtMatmul(g.handle, p->desc, &alpha, A, p->a, B, p->b, &beta, C, p->c, C, p->c,
                          p->has_algo ? &p->algo : nullptr, g.workspace, kworkspace, s));
}

}  // namespace merak::gpu
