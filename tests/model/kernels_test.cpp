#include <catch2/catch.hpp>

#include <omp.h>

#include <cmath>
#include <vector>

#include "model/backend.hpp"
#include "model/gemm.hpp"
#include "model/kernels/kernels.hpp"
#include "model/vec_math.hpp"
#include "tests/model/test_util.hpp"

using namespace merak;
using namespace merak::model;

TEST_CASE("every GEMM backend matches a naive product for all transposes and strides", "[gemm]") {
  const int M = 37, N = 29, K = 41, pad = 3;
  auto saved = current_gemm_backend();
  for (auto be : available_gemm_backends()) {
    set_gemm_backend(be);
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb) {
        INFO("backend " << gemm_backend_name(be) << " ta=" << ta << " tb=" << tb);
        int lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + pad, ldc = N + pad;
        auto A = test::random_tensor({(ta ? K : M) * int64_t(lda)}, 1);
        auto B = test::random_tensor({(tb ? N : K) * int64_t(ldb)}, 2);
        auto C = test::random_tensor({M * int64_t(ldc)}, 3);
        auto C0 = C.clone();
        sgemm(ta, tb, M, N, K, 0.5f, A.f32(), lda, B.f32(), ldb, 2.0f, C.f32(), ldc);
        double max_err = 0;
        for (int i = 0; i < M; ++i)
          for (int j = 0; j < N; ++j) {
            double s = 0;
            for (int k = 0; k < K; ++k) {
              double a = ta ? A.f32()[k * lda + i] : A.f32()[i * lda + k];
              double b = tb ? B.f32()[j * ldb + k] : B.f32()[k * ldb + j];
              s += a * b;
            }
            double want = 0.5 * s + 2.0 * C0.f32()[i * ldc + j];
            max_err = std::max(max_err, std::abs(want - C.f32()[i * ldc + j]));
          }
        CHECK(max_err < 1e-4);
      }
  }
  set_gemm_backend(saved);
}

TEST_CASE("fast_exp and fast_tanh are accurate", "[kernels]") {
  double worst = 0;
  for (float x = -80.f; x < 80.f; x += 0.01f)
    worst = std::max(worst, std::abs(fast_exp(x) / std::exp(double(x)) - 1.0));
  CHECK(worst < 5e-7);
  double worst_tanh = 0;
  for (float x = -10.f; x < 10.f; x += 0.001f)
    worst_tanh = std::max(worst_tanh, std::abs(fast_tanh(x) - std::tanh(double(x))));
  CHECK(worst_tanh < 5e-7);
  CHECK(fast_exp(-1000.f) >= 0.f);
  CHECK(std::isfinite(fast_exp(1000.f)));
}

TEST_CASE("causal attention matches a naive reference across query blocks", "[kernels]") {
  // T = 70 spans two 64-row query blocks.
  const int B = 2, T = 70, C = 12, NH = 3, hs = C / NH;
  auto qkv = test::random_tensor({B, T, 3 * C}, 5);
  tensor out({B, T, C}), att({B, NH, T, T});
  kernels::attention_forward(out.f32(), att.f32(), qkv.f32(), B, T, C, NH);
  double max_err = 0;
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < NH; ++h)
      for (int i = 0; i < T; ++i) {
        auto q = [&](int t, int d) { return double(qkv.f32()[(b * T + t) * 3 * C + h * hs + d]); };
        auto k = [&](int t, int d) {
          return double(qkv.f32()[(b * T + t) * 3 * C + C + h * hs + d]);
        };
        auto v = [&](int t, int d) {
          return double(qkv.f32()[(b * T + t) * 3 * C + 2 * C + h * hs + d]);
        };
        std::vector<double> s(i + 1);
        double mx = -1e300, sum = 0;
        for (int j = 0; j <= i; ++j) {
          s[j] = 0;
          for (int d = 0; d < hs; ++d) s[j] += q(i, d) * k(j, d);
          s[j] /= std::sqrt(double(hs));
          mx = std::max(mx, s[j]);
        }
        for (int j = 0; j <= i; ++j) sum += (s[j] = std::exp(s[j] - mx));
        for (int d = 0; d < hs; ++d) {
          double o = 0;
          for (int j = 0; j <= i; ++j) o += s[j] / sum * v(j, d);
          max_err = std::max(max_err, std::abs(o - out.f32()[(b * T + i) * C + h * hs + d]));
        }
      }
  CHECK(max_err < 1e-5);
}

TEST_CASE("cross-entropy equals -log softmax at the target", "[kernels]") {
  const int N = 5, V = 11;
  auto logits = test::random_tensor({N, V}, 7, 3.0f);
  auto targets = test::random_ids({N}, V, 8);
  tensor losses({N}), probs({N, V});
  kernels::crossentropy_forward(losses.f32(), probs.f32(), logits.f32(), targets.data<int32_t>(), N,
                                V);
  for (int n = 0; n < N; ++n) {
    double z = 0, mx = -1e300;
    for (int v = 0; v < V; ++v) mx = std::max(mx, double(logits.f32()[n * V + v]));
    for (int v = 0; v < V; ++v) z += std::exp(logits.f32()[n * V + v] - mx);
    double want = -(logits.f32()[n * V + targets.data<int32_t>()[n]] - mx - std::log(z));
    CHECK(losses.f32()[n] == Approx(want).epsilon(1e-5));
    double psum = 0;
    for (int v = 0; v < V; ++v) psum += probs.f32()[n * V + v];
    CHECK(psum == Approx(1.0).epsilon(1e-5));
  }
}

TEST_CASE("row-block sums do not depend on how many threads the team really gets", "[kernels]") {
  // Inside an active parallel region a nested one gets a single thread
  // while omp_get_max_threads() still says 4: every block of rows must
  // still be summed (they were skipped), and in the same order.
  const int N = 37, C = 9;
  auto x = test::random_tensor({N, C}, 11), dout = test::random_tensor({N, C}, 12);
  auto w = test::random_tensor({C}, 13), b = test::random_tensor({C}, 14);
  tensor out({N, C}), mean({N}), rstd({N});
  kernels::layernorm_forward(out.f32(), mean.f32(), rstd.f32(), x.f32(), w.f32(), b.f32(), N, C);
  auto backward = [&] {
    std::vector<float> dx(size_t(N) * C, 0.f), dw(C, 0.f), db(C, 0.f);
    kernels::layernorm_backward(dx.data(), dw.data(), db.data(), dout.f32(), x.f32(), w.f32(),
                                mean.f32(), rstd.f32(), N, C);
    dw.insert(dw.end(), db.begin(), db.end());
    return dw;
  };
  const int saved = omp_get_max_threads();
  omp_set_num_threads(4);
  const std::vector<float> full = backward();
  std::vector<float> nested;
  const int levels = omp_get_max_active_levels();
  omp_set_max_active_levels(1);
#pragma omp parallel num_threads(2)
  {
#pragma omp single
    {
      omp_set_num_threads(4);
      nested = backward();
    }
  }
  omp_set_max_active_levels(levels);
  omp_set_num_threads(saved);
  CHECK(nested == full);
}

TEST_CASE("a tensor or backend on a device this program did not enable is refused by name",
          "[kernels]") {
  if (model::has_device_memory(model::device::kind::cuda)) return;  // enabled (GPU tests)
  CHECK_THROWS_WITH(model::tensor({4}, model::dtype::f32, model::device::cuda(0)),
                    Catch::Contains("no memory for tensors on cuda:0"));
  CHECK_THROWS_WITH(model::backend_for(model::device::cuda(1)),
                    Catch::Contains("no backend for device cuda:1"));
  // Host tensors still move between host and host.
  auto x = test::random_tensor({3}, 1);
  auto y = x.to(model::device::cpu());
  CHECK(y.f32()[2] == x.f32()[2]);
}
