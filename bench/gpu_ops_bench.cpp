// The CUDA backend's operations at a GPT shape, timed on the device: each
// forward and backward of one transformer block, the embedding and the LM
// head with its loss, in float (TF32 GEMMs) or bf16. Prints one JSON object:
// per-op milliseconds, the GEMMs' TFLOP/s, and the sum of the ops of one
// training step (no optimizer, no host work) as a lower bound on the step
// time, with the MFU that bound implies (Megatron-LM's FLOP count without
// recomputation, on --peak-tflops). A program of its own, so that merak
// needs no CUDA. Exit 77 without a device.
//
// Usage: merak_gpu_ops_bench [--layers 12] [--dim 768] [--heads 12] [--seq 1024]
//          [--vocab 50304] [--batch 16] [--precision bf16|fp32] [--iters 10]
//          [--peak-tflops 989]
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/rng.hpp"
#include "gpu/cuda_backend.hpp"
#include "gpu/cuda_util.hpp"
#include "gpu/device.hpp"
#include "model/backend.hpp"

using namespace merak;
using model::dtype;
using model::tensor;

namespace {

struct options {
  int layers = 12, dim = 768, heads = 12, seq = 1024, vocab = 50304, batch = 16, iters = 10;
  bool bf16 = true;
  double peak_tflops = 989;  // H200 / H100 SXM dense bf16
};

options parse(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "merak_gpu_ops_bench: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--layers")
      o.layers = std::stoi(value());
    else if (a == "--dim")
      o.dim = std::stoi(value());
    else if (a == "--heads")
      o.heads = std::stoi(value());
    else if (a == "--seq")
      o.seq = std::stoi(value());
    else if (a == "--vocab")
      o.vocab = std::stoi(value());
    else if (a == "--batch")
      o.batch = std::stoi(value());
    else if (a == "--iters")
      o.iters = std::stoi(value());
    else if (a == "--peak-tflops")
      o.peak_tflops = std::stod(value());
    else if (a == "--precision") {
      auto p = value();
      if (p != "bf16" && p != "fp32") {
        std::fprintf(stderr, "merak_gpu_ops_bench: --precision bf16 or fp32 (got %s)\n", p.c_str());
        std::exit(2);
      }
      o.bf16 = p == "bf16";
    } else {
      std::fprintf(stderr, "merak_gpu_ops_bench: unknown flag %s\n", a.c_str());
      std::exit(2);
    }
  }
  return o;
}

const model::device gpu0 = model::device::cuda(0);

tensor random_on_gpu(const model::shape_t& shape, dtype type, uint64_t seed, float scale) {
  tensor f(shape);
  rng r(seed, 7);
  for (auto& x : f.span_f32()) x = float(r.normal()) * scale;
  tensor h(shape, type);
  model::backend_for(model::device::cpu()).copy(h, f);
  return h.to(gpu0);
}

tensor ids_on_gpu(const model::shape_t& shape, int limit, uint64_t seed) {
  tensor h(shape, dtype::i32);
  rng r(seed, 8);
  for (int64_t i = 0; i < h.numel(); ++i) h.data<int32_t>()[i] = int32_t(r.below(limit));
  return h.to(gpu0);
}

// Milliseconds per call of f, on the device (after one warm-up call),
// between events on the stream the backend orders its work on.
double time_ms(const std::function<void()>& f, int iters) {
  f();
  cudaDeviceSynchronize();
  cudaStream_t s = gpu::stream_of(0);
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  cudaEventRecord(a, s);
  for (int i = 0; i < iters; ++i) f();
  cudaEventRecord(b, s);
  cudaEventSynchronize(b);
  float ms = 0;
  cudaEventElapsedTime(&ms, a, b);
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return double(ms) / iters;
}

// Times each op it is given, `iters` runs each, and sums the times (and the
// linear layers' GEMM FLOPs and times) of the ops since the last reset. An op
// with FLOPs reports its TFLOP/s; `linear` says whether it joins the GEMM sums.
struct op_timer {
  int iters = 0;
  nlohmann::json ops;
  double ms = 0, gemm_flops = 0, gemm_ms = 0;

  void operator()(const char* name, double flops, const std::function<void()>& f,
                  bool linear = true) {
    const double op_ms = time_ms(f, iters);
    nlohmann::json j{{"ms", op_ms}};
    if (flops > 0) j["tflops"] = flops / (op_ms * 1e-3) / 1e12;
    if (flops > 0 && linear) {
      gemm_flops += flops;
      gemm_ms += op_ms;
    }
    ops[name] = j;
    ms += op_ms;
  }
  void reset_sums() { ms = gemm_flops = gemm_ms = 0; }
};

// One transformer block's ops, forward and backward, on random tensors.
void time_block(model::backend& be, const options& o, op_timer& op) {
  const dtype A = o.bf16 ? dtype::bf16 : dtype::f32;
  const int B = o.batch, T = o.seq, C = o.dim, NH = o.heads;
  const int64_t N = int64_t(B) * T;
  auto x = random_on_gpu({B, T, C}, A, 1, 1.f);
  auto g = random_on_gpu({B, T, C}, A, 2, 1e-2f);
  auto lnw = random_on_gpu({C}, dtype::f32, 3, 1.f), lnb = random_on_gpu({C}, dtype::f32, 4, 0.1f);
  auto mean = tensor({N}, dtype::f32, gpu0), rstd = tensor({N}, dtype::f32, gpu0);
  auto out = tensor({B, T, C}, A, gpu0), dx = tensor::zeros({B, T, C}, A, gpu0);
  auto dlnw = tensor::zeros({C}, dtype::f32, gpu0), dlnb = tensor::zeros({C}, dtype::f32, gpu0);
  auto w_qkv = random_on_gpu({3 * C, C}, A, 5, 0.02f), w_proj = random_on_gpu({C, C}, A, 6, 0.02f);
  auto w_fc = random_on_gpu({4 * C, C}, A, 7, 0.02f),
       w_fc2 = random_on_gpu({C, 4 * C}, A, 8, 0.02f);
  auto b3 = random_on_gpu({3 * C}, dtype::f32, 9, 0.f),
       b4 = random_on_gpu({4 * C}, dtype::f32, 10, 0.f);
  auto b1 = random_on_gpu({C}, dtype::f32, 11, 0.f);
  auto qkv = tensor({B, T, 3 * C}, A, gpu0), dqkv = tensor::zeros({B, T, 3 * C}, A, gpu0);
  // What the layer stashes on this backend: the fused kernel's log-sum-exp
  // rows, or the probabilities.
  const auto stash = be.attention_stash_for(B, NH, T, C / NH, A);
  auto att = tensor(stash.shape, stash.type, gpu0);
  auto h4 = tensor({B, T, 4 * C}, A, gpu0), dh4 = tensor::zeros({B, T, 4 * C}, A, gpu0);
  auto gelu = tensor({B, T, 4 * C}, A, gpu0);
  auto dw3 = tensor::zeros({3 * C, C}, dtype::f32, gpu0),
       dw1 = tensor::zeros({C, C}, dtype::f32, gpu0);
  auto dw4 = tensor::zeros({4 * C, C}, dtype::f32, gpu0),
       dw4b = tensor::zeros({C, 4 * C}, dtype::f32, gpu0);
  auto db3 = tensor::zeros({3 * C}, dtype::f32, gpu0),
       db4 = tensor::zeros({4 * C}, dtype::f32, gpu0);
  auto db1 = tensor::zeros({C}, dtype::f32, gpu0);
  auto g4 = random_on_gpu({B, T, 4 * C}, A, 12, 1e-2f),
       g3 = random_on_gpu({B, T, 3 * C}, A, 13, 1e-2f);
  // Attention runs on real projections so its softmax is typical.
  be.matmul_forward(qkv, x, w_qkv, &b3);

  const double n = double(N);
  op("ln1_forward", 0, [&] { be.layernorm_forward(out, mean, rstd, x, lnw, lnb); });
  op("qkv_forward", 2 * n * C * 3 * C, [&] { be.matmul_forward(qkv, out, w_qkv, &b3); });
  // Causal attention's useful FLOPs (the lower triangle of Q K^T and P V,
  // 2 hs multiply-adds per entry each): 2 B NH T^2 hs forward, 2.5 times
  // that backward (dP, dQ, dK, dV and the recomputation-free dS).
  const double attention_flops = 2.0 * B * NH * double(T) * T * (C / NH);
  op(
      "attention_forward", attention_flops, [&] { be.attention_forward(out, att, qkv, NH); },
      false);
  op("proj_forward", 2 * n * C * C, [&] { be.matmul_forward(out, x, w_proj, &b1); });
  op("residual1_forward", 0, [&] { be.residual_forward(out, x, g); });
  op("ln2_forward", 0, [&] { be.layernorm_forward(out, mean, rstd, x, lnw, lnb); });
  op("fc_forward", 2 * n * C * 4 * C, [&] { be.matmul_forward(h4, out, w_fc, &b4); });
  op("gelu_forward", 0, [&] { be.gelu_forward(gelu, h4); });
  op("fc2_forward", 2 * n * 4 * C * C, [&] { be.matmul_forward(out, gelu, w_fc2, &b1); });
  op("residual2_forward", 0, [&] { be.residual_forward(out, x, g); });
  op("fc2_backward", 4 * n * 4 * C * C,
     [&] { be.matmul_backward(&dh4, &dw4b, &db1, g, gelu, w_fc2); });
  op("gelu_backward", 0, [&] { be.gelu_backward(dh4, h4, g4); });
  op("fc_backward", 4 * n * C * 4 * C, [&] { be.matmul_backward(&dx, &dw4, &db4, g4, out, w_fc); });
  op("ln2_backward", 0, [&] { be.layernorm_backward(dx, dlnw, dlnb, g, x, lnw, mean, rstd); });
  op("residual_backward", 0, [&] { be.residual_backward(dx, out, g); });
  op("proj_backward", 4 * n * C * C, [&] { be.matmul_backward(&dx, &dw1, &db1, g, x, w_proj); });
  op(
      "attention_backward", 2.5 * attention_flops,
      [&] { be.attention_backward(dqkv, g, qkv, att, NH); }, false);
  op("qkv_backward", 4 * n * C * 3 * C,
     [&] { be.matmul_backward(&dx, &dw3, &db3, g3, out, w_qkv); });
  op("ln1_backward", 0, [&] { be.layernorm_backward(dx, dlnw, dlnb, g, x, lnw, mean, rstd); });
}

// The embedding, final layer norm, LM head (tied) and loss: once per step.
void time_once_per_step(model::backend& be, const options& o, op_timer& op) {
  const dtype A = o.bf16 ? dtype::bf16 : dtype::f32;
  const int B = o.batch, T = o.seq, C = o.dim, V = o.vocab;
  const int64_t N = int64_t(B) * T;
  const double n = double(N);
  auto x = random_on_gpu({B, T, C}, A, 1, 1.f);
  auto g = random_on_gpu({B, T, C}, A, 2, 1e-2f);
  auto out = tensor({B, T, C}, A, gpu0), dx = tensor::zeros({B, T, C}, A, gpu0);
  auto tokens = ids_on_gpu({B, T}, V, 14), targets = ids_on_gpu({B, T}, V, 15);
  auto wte = random_on_gpu({V, C}, dtype::f32, 16, 0.02f),
       wpe = random_on_gpu({T, C}, dtype::f32, 17, 0.01f);
  auto wte_a = tensor({V, C}, A, gpu0);
  be.copy(wte_a, wte);
  auto dwte = tensor::zeros({V, C}, dtype::f32, gpu0),
       dwpe = tensor::zeros({T, C}, dtype::f32, gpu0);
  auto logits = tensor({B, T, V}, A, gpu0), dlogits = tensor::zeros({B, T, V}, A, gpu0);
  auto losses = tensor({B, T}, dtype::f32, gpu0), probs = tensor({N, V}, dtype::f32, gpu0);
  auto dlosses = random_on_gpu({B, T}, dtype::f32, 18, 0.f);
  op("embedding_forward", 0, [&] { be.encoder_forward(out, tokens, wte, wpe); });
  op("lm_head_forward", 2 * n * C * V, [&] { be.matmul_forward(logits, x, wte_a, nullptr); });
  op("loss_forward", 0, [&] { be.crossentropy_forward(losses, probs, logits, targets, int(logits.dim(-1))); });
  op("loss_backward", 0, [&] { be.crossentropy_backward(dlogits, dlosses, probs, targets); });
  op("lm_head_backward", 4 * n * C * V,
     [&] { be.matmul_backward(&dx, &dwte, nullptr, dlogits, x, wte_a); });
  op("embedding_backward", 0, [&] { be.encoder_backward(dwte, dwpe, g, tokens); });
}

}  // namespace

int main(int argc, char** argv) {
  const options o = parse(argc, argv);
  auto devs = gpu::cuda_devices();
  if (devs.empty()) {
    std::printf("skipped: %s\n", gpu::cuda_unavailable_reason().c_str());
    return 77;
  }
  try {
    gpu::enable_cuda();
    auto& be = model::backend_for(gpu0);
    const int B = o.batch, T = o.seq, C = o.dim, NH = o.heads, V = o.vocab;
    const int64_t N = int64_t(B) * T;
    op_timer op;
    op.iters = o.iters;
    time_block(be, o, op);
    const double block_ms = op.ms;
    const double block_gemm_flops = op.gemm_flops, block_gemm_ms = op.gemm_ms;
    op.reset_sums();
    time_once_per_step(be, o, op);
    const double once_ms = op.ms;
    nlohmann::json& ops = op.ops;

    const double step_s = (o.layers * block_ms + once_ms) * 1e-3;
    const double s = T, h = C, l = o.layers;
    const double flops = 72.0 * B * s * l * h * h * (1 + s / (6 * h) + V / (12 * l * h));
    const double mfu = flops / step_s / (o.peak_tflops * 1e12);
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    nlohmann::json j{
        {"benchmark", "gpu_ops"},
        {"device", devs[0].name},
        {"precision", o.bf16 ? "bf16" : "fp32 (TF32 GEMMs)"},
        {"model", {{"layers", o.layers}, {"dim", C}, {"heads", NH}, {"seq", T}, {"vocab", V}}},
        {"batch", B},
        {"ops", ops},
        {"block_ms", block_ms},
        {"block_gemm_tflops", block_gemm_flops / (block_gemm_ms * 1e-3) / 1e12},
        {"block_gemm_share", block_gemm_ms / block_ms},
        {"once_ms", once_ms},
        {"kernel_sum_step_s", step_s},
        {"kernel_sum_tokens_per_s", double(N) / step_s},
        {"kernel_sum_mfu", mfu},
        {"mfu_flop_count", "megatron-72 (no recomputation)"},
        {"peak_tflops", o.peak_tflops},
        {"device_memory_used_gib", double(total_b - free_b) / (1 << 30)}};
    std::printf("%s\n", j.dump().c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "merak_gpu_ops_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
