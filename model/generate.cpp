#include "model/generate.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>

#include <fmt/format.h>

#include "core/error.hpp"
#include "model/kernels/kernels.hpp"
#include "model/llama.hpp"
#include "model/model_metadata.hpp"
#include "model/parameter.hpp"
#include "model/sharded_checkpoint.hpp"

namespace merak::model {

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// One block's weights; the biases (GPT-2 only) and ln*_b are empty for
// Llama, whose norms are RMSNorms. "fc" is GPT-2's 4C MLP input or Llama's
// fused [gate | up]; "out" the MLP's output projection.
struct block_weights {
  tensor ln1_w, ln1_b, qkv_w, qkv_b, proj_w, proj_b;
  tensor ln2_w, ln2_b, fc_w, fc_b, out_w, out_b;
};

const float* data_or_null(const tensor& t) {
  return t.defined() ? t.f32() : nullptr;
}

}  // namespace

struct kv_decoder::impl {
  gpt_config cfg;
  bool llama = false;
  int C = 0, NH = 0, G = 0, hs = 0, F = 0, qkv_width = 0, kv_width = 0, logit_rows = 0;
  tensor wte, wpe, lnf_w, lnf_b, head;  // head: the output layer (may alias wte's values)
  std::vector<block_weights> blocks;
  std::vector<std::vector<float>> k_cache, v_cache;  // per layer: (max_seq, kv_width)
  int length = 0;
  std::vector<float> logits;

  // Fetches `name` and checks its shape; min_rows > 0: at least that many
  // rows (a padded vocabulary) and the given columns.
  tensor need(const weight_source& weights, const std::string& name, const shape_t& shape,
              int64_t min_rows = 0) {
    tensor t = weights(name);
    if (t.where() != device::cpu()) t = t.to(device::cpu());
    bool ok = t.type() == dtype::f32 && t.rank() == int(shape.size());
    if (ok && min_rows > 0)
      ok = t.dim(0) >= min_rows && t.dim(1) == shape[1];
    else if (ok)
      ok = t.shape() == shape;
    if (!ok)
      fail("weight '{}' has shape {} ({}); the model {} needs {}{}", name, shape_str(t.shape()),
           dtype_name(t.type()), cfg.str(), shape_str(shape),
           min_rows > 0 ? fmt::format(" with at least {} rows", min_rows) : "");
    return t;
  }

  void load_gpt(const weight_source& w) {
    const int64_t c = C;
    wte = need(w, "wte", {cfg.vocab, c}, cfg.vocab);
    wpe = need(w, "wpe", {cfg.max_seq, c});
    for (int l = 0; l < cfg.layers; ++l) {
      const auto p = fmt::format("h{}.", l);
      block_weights b;
      b.ln1_w = need(w, p + "ln1.weight", {c});
      b.ln1_b = need(w, p + "ln1.bias", {c});
      b.qkv_w = need(w, p + "attn.qkv.weight", {3 * c, c});
      b.qkv_b = need(w, p + "attn.qkv.bias", {3 * c});
      b.proj_w = need(w, p + "attn.proj.weight", {c, c});
      b.proj_b = need(w, p + "attn.proj.bias", {c});
      b.ln2_w = need(w, p + "ln2.weight", {c});
      b.ln2_b = need(w, p + "ln2.bias", {c});
      b.fc_w = need(w, p + "mlp.fc.weight", {4 * c, c});
      b.fc_b = need(w, p + "mlp.fc.bias", {4 * c});
      b.out_w = need(w, p + "mlp.proj.weight", {c, 4 * c});
      b.out_b = need(w, p + "mlp.proj.bias", {c});
      blocks.push_back(std::move(b));
    }
    lnf_w = need(w, "ln_f.weight", {c});
    lnf_b = need(w, "ln_f.bias", {c});
    head = cfg.tied_head ? wte.clone() : need(w, "lm_head.weight", {cfg.vocab, c}, cfg.vocab);
  }

  void load_llama(const weight_source& w) {
    const int64_t c = C;
    wte = need(w, "embedding.word_embeddings.weight", {cfg.vocab, c}, cfg.vocab);
    for (int l = 0; l < cfg.layers; ++l) {
      const auto p = fmt::format("decoder.layers.{}.", l);
      block_weights b;
      b.ln1_w = need(w, p + "input_layernorm.weight", {c});
      b.qkv_w = need(w, p + "self_attention.linear_qkv.weight", {qkv_width, c});
      b.proj_w = need(w, p + "self_attention.linear_proj.weight", {c, c});
      b.ln2_w = need(w, p + "pre_mlp_layernorm.weight", {c});
      b.fc_w = need(w, p + "mlp.linear_fc1.weight", {2 * int64_t(F), c});
      b.out_w = need(w, p + "mlp.linear_fc2.weight", {c, F});
      blocks.push_back(std::move(b));
    }
    lnf_w = need(w, "decoder.final_layernorm.weight", {c});
    head = need(w, "output_layer.weight", {cfg.vocab, c}, cfg.vocab);
  }

  // x (n, C) -> out (n, C): the block's pre-norm.
  void norm(float* out, const float* x, const tensor& w, const tensor& b, int n) const {
    std::vector<float> mean(static_cast<size_t>(n)), rstd(static_cast<size_t>(n));
    if (llama)
      kernels::rmsnorm_forward(out, rstd.data(), x, w.f32(), n, C, cfg.norm_epsilon);
    else
      kernels::layernorm_forward(out, mean.data(), rstd.data(), x, w.f32(), b.f32(), n, C);
  }

  // qkv (n, qkv_width) of positions p0 .. p0 + n - 1, whose K/V are already
  // cached -> out (n, C): each query head attends causally over the cache.
  void attend(float* out, const float* qkv, int n, int p0, int layer) const {
    const float* kc = k_cache[size_t(layer)].data();
    const float* vc = v_cache[size_t(layer)].data();
    const float scale = 1.0f / std::sqrt(float(hs));
    const int per_group = NH / G;
    // Threads only where the work outweighs waking them (a long prefill).
    const int64_t work = int64_t(n) * NH * (p0 + n) * hs;
#pragma omp parallel for schedule(static) if (work > (1 << 16))
    for (int64_t job = 0; job < int64_t(n) * NH; ++job) {
      const int i = int(job / NH), h = int(job % NH), g = h / per_group;
      const int keys = p0 + i + 1;
      const float* q = qkv + int64_t(i) * qkv_width + int64_t(h) * hs;
      std::vector<float> s(static_cast<size_t>(keys));
      float mx = -INFINITY;
      for (int t = 0; t < keys; ++t) {
        const float* k = kc + int64_t(t) * kv_width + int64_t(g) * hs;
        float dot = 0;
        for (int d = 0; d < hs; ++d) dot += q[d] * k[d];
        s[size_t(t)] = dot * scale;
        mx = std::max(mx, s[size_t(t)]);
      }
      float sum = 0;
      for (auto& v : s) sum += (v = std::exp(v - mx));
      const float inv = 1.0f / sum;
      float* o = out + int64_t(i) * C + int64_t(h) * hs;
      std::fill(o, o + hs, 0.0f);
      for (int t = 0; t < keys; ++t) {
        const float* v = vc + int64_t(t) * kv_width + int64_t(g) * hs;
        const float pr = s[size_t(t)] * inv;
        for (int d = 0; d < hs; ++d) o[d] += pr * v[d];
      }
    }
  }

  // One block over x (n, C) in place, positions p0 ...
  void block(std::vector<float>& x, int n, int p0, int layer) {
    const block_weights& b = blocks[size_t(layer)];
    std::vector<float> a(size_t(n) * C), qkv(size_t(n) * qkv_width), y(size_t(n) * C);
    norm(a.data(), x.data(), b.ln1_w, b.ln1_b, n);
    kernels::matmul_forward(qkv.data(), a.data(), b.qkv_w.f32(), data_or_null(b.qkv_b), n, C,
                            qkv_width);
    if (llama)  // Q and K heads rotated at their positions, V copied
      kernels::rope_forward(qkv.data(), qkv.data(), 1, n, qkv_width, NH + G, hs, cfg.rotary_base,
                            p0);
    for (int i = 0; i < n; ++i) {
      const float* row = qkv.data() + int64_t(i) * qkv_width;
      std::copy(row + C, row + C + kv_width,
                k_cache[size_t(layer)].data() + int64_t(p0 + i) * kv_width);
      std::copy(row + C + kv_width, row + C + 2 * kv_width,
                v_cache[size_t(layer)].data() + int64_t(p0 + i) * kv_width);
    }
    attend(a.data(), qkv.data(), n, p0, layer);
    kernels::matmul_forward(y.data(), a.data(), b.proj_w.f32(), data_or_null(b.proj_b), n, C, C);
    kernels::residual_forward(x.data(), x.data(), y.data(), int64_t(n) * C);
    norm(a.data(), x.data(), b.ln2_w, b.ln2_b, n);
    const int hidden = llama ? 2 * F : 4 * C;
    std::vector<float> h(size_t(n) * hidden);
    kernels::matmul_forward(h.data(), a.data(), b.fc_w.f32(), data_or_null(b.fc_b), n, C, hidden);
    const int inner = llama ? F : 4 * C;
    std::vector<float> act(size_t(n) * inner);
    if (llama)
      kernels::swiglu_forward(act.data(), h.data(), n, F);
    else
      kernels::gelu_forward(act.data(), h.data(), int64_t(n) * inner);
    kernels::matmul_forward(y.data(), act.data(), b.out_w.f32(), data_or_null(b.out_b), n, inner,
                            C);
    kernels::residual_forward(x.data(), x.data(), y.data(), int64_t(n) * C);
  }
};

kv_decoder::kv_decoder(const gpt_config& cfg, const weight_source& weights)
    : p_(std::make_unique<impl>()) {
  if (cfg.build) fail("generate: a custom model (gpt_config::build) has no built-in decoder");
  cfg.validate();
  impl& m = *p_;
  m.cfg = cfg;
  m.llama = cfg.family == model_family::llama;
  m.C = cfg.dim;
  m.NH = cfg.heads;
  m.G = m.llama ? llama_query_groups(cfg) : cfg.heads;
  m.hs = cfg.dim / cfg.heads;
  m.F = m.llama ? llama_ffn_size(cfg) : 4 * cfg.dim;
  m.kv_width = m.G * m.hs;
  m.qkv_width = m.C + 2 * m.kv_width;
  if (m.llama)
    m.load_llama(weights);
  else
    m.load_gpt(weights);
  m.logit_rows = int(m.head.dim(0));
  m.k_cache.assign(size_t(cfg.layers), std::vector<float>(size_t(cfg.max_seq) * m.kv_width));
  m.v_cache.assign(size_t(cfg.layers), std::vector<float>(size_t(cfg.max_seq) * m.kv_width));
}

kv_decoder::kv_decoder(kv_decoder&&) noexcept = default;
kv_decoder& kv_decoder::operator=(kv_decoder&&) noexcept = default;
kv_decoder::~kv_decoder() = default;

const gpt_config& kv_decoder::config() const {
  return p_->cfg;
}
int kv_decoder::length() const {
  return p_->length;
}
int kv_decoder::capacity() const {
  return p_->cfg.max_seq;
}
int kv_decoder::logit_rows() const {
  return p_->logit_rows;
}
void kv_decoder::reset() {
  p_->length = 0;
}

const std::vector<float>& kv_decoder::append(std::span<const int32_t> tokens, bool all_logits) {
  impl& m = *p_;
  const int n = int(tokens.size());
  if (n == 0) fail("generate: no tokens to run");
  if (int64_t(m.length) + n > m.cfg.max_seq)
    fail("generate: {} cached positions plus {} new ones pass the model's {} positions", m.length,
         n, m.cfg.max_seq);
  for (int32_t t : tokens)
    if (t < 0 || t >= m.cfg.vocab)
      fail("generate: token id {} is outside the model's vocabulary [0, {})", t, m.cfg.vocab);
  const int p0 = m.length, C = m.C;
  std::vector<float> x(size_t(n) * C);
  for (int i = 0; i < n; ++i) {
    const float* e = m.wte.f32() + int64_t(tokens[size_t(i)]) * C;
    float* xi = x.data() + int64_t(i) * C;
    std::copy(e, e + C, xi);
    if (!m.llama) {
      const float* pe = m.wpe.f32() + int64_t(p0 + i) * C;
      for (int c = 0; c < C; ++c) xi[c] += pe[c];
    }
  }
  for (int l = 0; l < m.cfg.layers; ++l) m.block(x, n, p0, l);
  m.length += n;
  const int rows = all_logits ? n : 1;
  const float* last = x.data() + int64_t(n - rows) * C;
  std::vector<float> a(size_t(rows) * C);
  m.norm(a.data(), last, m.lnf_w, m.lnf_b, rows);
  m.logits.assign(size_t(rows) * m.logit_rows, 0.0f);
  kernels::matmul_forward(m.logits.data(), a.data(), m.head.f32(), nullptr, rows, C, m.logit_rows);
  return m.logits;
}

int32_t pick_token(std::span<const float> logits, int vocab, const sampling& s, rng& r) {
  if (vocab < 1 || size_t(vocab) > logits.size())
    fail("generate: vocabulary {} does not fit a row of {} logits", vocab, logits.size());
  if (!(s.temperature >= 0)) fail("--temperature must be at least 0 (got {})", s.temperature);
  if (s.top_k < 0) fail("--top-k must be at least 0 (got {})", s.top_k);
  const auto real = logits.first(size_t(vocab));  // rows past vocab are padding
  if (s.temperature == 0)
    return int32_t(std::max_element(real.begin(), real.end()) - real.begin());
  std::vector<int32_t> ids(real.size());
  std::iota(ids.begin(), ids.end(), 0);
  size_t k = s.top_k > 0 ? std::min(size_t(s.top_k), ids.size()) : ids.size();
  // The k largest first, ties to the lower id; their order is fixed.
  auto larger = [&](int32_t a, int32_t b) {
    return real[size_t(a)] != real[size_t(b)] ? real[size_t(a)] > real[size_t(b)] : a < b;
  };
  std::partial_sort(ids.begin(), ids.begin() + std::ptrdiff_t(k), ids.end(), larger);
  ids.resize(k);
  const double mx = real[size_t(ids[0])];
  std::vector<double> w(k);
  double sum = 0;
  for (size_t i = 0; i < k; ++i)
    sum += (w[i] = std::exp((double(real[size_t(ids[i])]) - mx) / s.temperature));
  double u = r.uniform() * sum;
  for (size_t i = 0; i < k; ++i) {
    if (u < w[i]) return ids[i];
    u -= w[i];
  }
  return ids[k - 1];
}

generate_result generate(kv_decoder& dec, std::span<const int32_t> prompt,
                         const generate_options& o) {
  if (prompt.empty()) fail("generate: the prompt has no tokens");
  if (o.max_new_tokens < 1)
    fail("--max-new-tokens must be at least 1 (got {})", o.max_new_tokens);
  const int64_t need = int64_t(prompt.size()) + o.max_new_tokens;
  if (need > dec.capacity())
    fail(
        "the prompt's {} tokens plus --max-new-tokens {} make {} positions, more than the "
        "model's {} (its max_seq)",
        prompt.size(), o.max_new_tokens, need, dec.capacity());
  dec.reset();
  rng r(o.sample.seed, 0x67656e);
  const int vocab = dec.config().vocab;
  generate_result res;
  auto t0 = std::chrono::steady_clock::now();
  const auto& first = dec.append(prompt);
  int32_t next = pick_token(first, vocab, o.sample, r);
  res.prefill_s = seconds_since(t0);
  double step_s = 0;
  int steps = 0;
  while (true) {
    if (o.stop && next == *o.stop) {
      res.stopped = true;
      break;
    }
    res.tokens.push_back(next);
    if (int(res.tokens.size()) == o.max_new_tokens) break;
    t0 = std::chrono::steady_clock::now();
    const auto& row = dec.append(std::span<const int32_t>(&next, 1));
    next = pick_token(row, vocab, o.sample, r);
    step_s += seconds_since(t0);
    ++steps;
  }
  res.per_token_s = steps ? step_s / steps : 0.0;
  return res;
}

weight_source store_weights(const parameter_store& store) {
  return [&store](const std::string& name) {
    auto p = store.find(name);
    if (!p) fail("generate: the parameter store has no weight '{}'", name);
    if (p->spec.shard.sharded())
      fail("generate: weight '{}' is a tensor-parallel shard; the decoder needs whole weights",
           name);
    return p->value.to(device::cpu());
  };
}

loaded_decoder load_decoder(const std::string& path) {
  const checkpoint_reader ckpt(path);
  const auto& meta = ckpt.metadata();
  auto it = meta.find("merak.model");
  if (it == meta.end()) fail("checkpoint '{}': metadata merak.model is missing", ckpt.dir());
  gpt_config cfg = parse_model_metadata(it->second, fmt::format("checkpoint '{}'", ckpt.dir()));
  auto tok = meta.find("merak.tokenizer");
  kv_decoder dec(cfg, [&ckpt](const std::string& name) { return ckpt.full(name); });
  return {ckpt.dir(), cfg, tok == meta.end() ? "bytes" : tok->second, std::move(dec)};
}

}  // namespace merak::model
