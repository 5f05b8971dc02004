// The distributed optimizer's slices against the plain AdamW: d replicas
// simulated in one process, each stepping its owned slices, the slices then
// gathered as the all-gather would; every replica must hold the plain
// optimizer's weights and moments bit for bit.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.hpp"
#include "core/rng.hpp"
#include "model/distributed_adamw.hpp"

using namespace merak;
using namespace merak::model;

namespace {

// Parameters of uneven sizes, one without weight decay, filled from `seed`.
std::vector<parameter_ptr> make_params(uint64_t seed) {
  const std::vector<std::pair<std::string, shape_t>> specs = {
      {"a.weight", {7, 5}}, {"a.bias", {5}}, {"b.weight", {3, 11}}, {"c.weight", {13}}, {"d", {1}}};
  std::vector<parameter_ptr> out;
  rng r(seed, 0);
  for (auto& [name, shape] : specs) {
    auto p = std::make_shared<parameter>();
    p->spec.name = name;
    p->spec.shape = shape;
    p->spec.decay = name != "a.bias";
    p->value = tensor(shape);
    p->grad = tensor::zeros(shape);
    for (int64_t i = 0; i < p->value.numel(); ++i) p->value.f32()[i] = float(r.normal()) * 0.1f;
    out.push_back(p);
  }
  return out;
}

std::vector<parameter_ptr> copy_of(const std::vector<parameter_ptr>& ps) {
  std::vector<parameter_ptr> out;
  for (auto& p : ps) {
    auto q = std::make_shared<parameter>();
    q->spec = p->spec;
    q->value = p->value.clone();
    q->grad = p->grad.clone();
    out.push_back(q);
  }
  return out;
}

bool same_bits(const tensor& a, const tensor& b) {
  return a.numel() == b.numel() && std::memcmp(a.raw(), b.raw(), a.bytes()) == 0;
}

// Buckets as the gradient bucketer would make them: reverse order, split.
const std::vector<std::vector<int>> kBuckets = {{4, 3}, {2}, {1, 0}};

// d replicas of `reference` (copies), each with its distributed optimizer.
struct replica_set {
  std::vector<std::vector<parameter_ptr>> params;
  std::vector<std::unique_ptr<distributed_adamw>> opts;
  replica_set(const std::vector<parameter_ptr>& reference, const adamw_config& cfg, int d) {
    for (int r = 0; r < d; ++r) {
      params.push_back(copy_of(reference));
      opts.push_back(std::make_unique<distributed_adamw>(cfg, params.back(), kBuckets, d, r));
    }
  }
  // The same random gradient in the reference and every replica (the
  // summed gradient every replica's slice holds).
  void fill_gradients(const std::vector<parameter_ptr>& reference, rng& gr) {
    for (size_t i = 0; i < reference.size(); ++i)
      for (int64_t j = 0; j < reference[i]->grad.numel(); ++j) {
        const float g = float(gr.normal());
        reference[i]->grad.f32()[j] = g;
        for (auto& rep : params) rep[i]->grad.f32()[j] = g;
      }
  }
};

// Bucket b as the all-gather leaves it: every replica's owned slice packed
// into one flat buffer that starts as NaN (so a slice nobody owns shows).
tensor gathered(const std::vector<std::unique_ptr<distributed_adamw>>& opts, int b) {
  tensor flat({opts.front()->bucket_numel(b)});
  std::fill_n(flat.f32(), flat.numel(), std::nanf(""));
  for (auto& o : opts) o->pack_owned_values(b, flat.f32());
  return flat;
}

}  // namespace

TEST_CASE("distributed AdamW: d replicas' slices give the plain optimizer's weights bit for bit",
          "[model][optimizer]") {
  const int d = GENERATE(1, 2, 3, 4, 7);
  const adamw_config cfg{0.9f, 0.95f, 1e-8f, 0.1f};
  auto reference = make_params(11);
  adamw plain(cfg, reference);
  replica_set set(reference, cfg, d);
  auto& replicas = set.params;
  auto& opts = set.opts;
  rng gr(5, 0);
  for (int step = 0; step < 6; ++step) {
    set.fill_gradients(reference, gr);
    const float lr = 1e-2f * float(step + 1), clip = step % 2 ? 0.5f : 1.0f;
    plain.step(lr, clip, true);
    for (auto& o : opts) o->step(lr, clip, true);
    for (int b = 0; b < int(kBuckets.size()); ++b) {  // the all-gather
      const tensor flat = gathered(opts, b);
      for (int64_t i = 0; i < flat.numel(); ++i)
        REQUIRE(!std::isnan(flat.f32()[i]));  // the owned slices cover the bucket
      for (auto& o : opts) o->unpack_values(b, flat);
    }
    for (auto& rep : replicas)
      for (size_t i = 0; i < reference.size(); ++i) {
        INFO("d " << d << " step " << step << " parameter " << reference[i]->spec.name);
        REQUIRE(same_bits(rep[i]->value, reference[i]->value));
        for (int64_t j = 0; j < rep[i]->grad.numel(); ++j) REQUIRE(rep[i]->grad.f32()[j] == 0.f);
      }
  }
  // The replicas' moment pieces (what checkpoints hold) cover every
  // parameter's elements once, with the plain optimizer's moments.
  for (size_t p = 0; p < reference.size(); ++p) {
    const int64_t n = reference[p]->value.numel();
    std::vector<float> m(size_t(n), std::nanf("")), v(m);
    std::vector<int> seen(size_t(n), 0);
    for (auto& o : opts) {
      const int b = o->bucket_of(int(p));
      for (auto& pc : o->owned_pieces(b)) {
        if (pc.param != int(p)) continue;
        auto [pm, pv] = o->piece_moments(b, pc);
        for (int64_t j = pc.begin; j < pc.end; ++j) {
          m[size_t(j)] = pm[j - pc.begin];
          v[size_t(j)] = pv[j - pc.begin];
          ++seen[size_t(j)];
        }
      }
    }
    for (int s : seen) REQUIRE(s == 1);
    REQUIRE(std::memcmp(m.data(), plain.first_moments()[p].f32(), size_t(n) * 4) == 0);
    REQUIRE(std::memcmp(v.data(), plain.second_moments()[p].f32(), size_t(n) * 4) == 0);
  }
  int64_t held = 0;
  for (auto& o : opts) held += o->moment_bytes();
  CHECK(held == 2 * 4 * (35 + 5 + 33 + 13 + 1));  // the moments split, none held twice
  CHECK(opts[0]->moment_bytes() <= 2 * 4 * ((35 + 5) / d + 33 / d + (13 + 1) / d + 3));
}

TEST_CASE("distributed AdamW: moments loaded from whole tensors continue like the plain optimizer",
          "[model][optimizer]") {
  const adamw_config cfg{0.9f, 0.95f, 1e-8f, 0.1f};
  auto reference = make_params(3);
  adamw plain(cfg, reference);
  auto fill_grads = [&](std::vector<parameter_ptr>& ps, uint64_t seed) {
    rng x(seed, 0);
    for (auto& p : ps)
      for (int64_t j = 0; j < p->grad.numel(); ++j) p->grad.f32()[j] = float(x.normal());
  };
  fill_grads(reference, 1);
  plain.step(1e-2f, 1.0f, true);
  fill_grads(reference, 2);
  plain.step(1e-2f, 1.0f, true);
  // A resume with d = 3 from the plain optimizer's state.
  std::vector<std::vector<parameter_ptr>> replicas;
  std::vector<std::unique_ptr<distributed_adamw>> opts;
  for (int r = 0; r < 3; ++r) {
    replicas.push_back(copy_of(reference));
    opts.push_back(std::make_unique<distributed_adamw>(cfg, replicas.back(), kBuckets, 3, r));
    opts.back()->set_moments(plain.first_moments(), plain.second_moments());
    opts.back()->set_t(plain.t());
  }
  fill_grads(reference, 3);
  plain.step(1e-2f, 1.0f, true);
  for (auto& rep : replicas) fill_grads(rep, 3);
  for (auto& o : opts) o->step(1e-2f, 1.0f, true);
  for (int b = 0; b < int(kBuckets.size()); ++b) {
    opts[1]->unpack_values(b, gathered(opts, b));
  }
  for (size_t i = 0; i < reference.size(); ++i)
    REQUIRE(same_bits(replicas[1][i]->value, reference[i]->value));
}

TEST_CASE("distributed AdamW: the owned gradient squares add up to the whole gradient's",
          "[model][optimizer]") {
  auto params = make_params(4);
  rng x(8, 0);
  double whole = 0;
  for (auto& p : params)
    for (int64_t j = 0; j < p->grad.numel(); ++j) {
      p->grad.f32()[j] = float(x.normal());
      if (p->spec.name != "c.weight") whole += double(p->grad.f32()[j]) * p->grad.f32()[j];
    }
  double shares = 0;
  for (int r = 0; r < 4; ++r) {
    distributed_adamw o({}, params, kBuckets, 4, r);
    shares += o.owned_sumsq([&](int p) { return params[size_t(p)]->spec.name != "c.weight"; });
  }
  CHECK(shares == Approx(whole).epsilon(1e-12));
}

TEST_CASE("distributed AdamW: a bucket layout that misses or repeats a parameter is refused",
          "[model][optimizer]") {
  auto params = make_params(1);
  CHECK_THROWS_WITH(distributed_adamw({}, params, {{4, 3}, {2}, {1}}, 2, 0),
                    Catch::Contains("'a.weight' is in no bucket"));
  CHECK_THROWS_WITH(distributed_adamw({}, params, {{4, 3}, {2, 3}, {1, 0}}, 2, 0),
                    Catch::Contains("'c.weight' in buckets 0 and 1"));
  CHECK_THROWS_WITH(distributed_adamw({}, params, kBuckets, 2, 2), Catch::Contains("rank 2 of 2"));
}

TEST_CASE("distributed AdamW: value shards step like whole values and gather back bit for bit",
          "[model][optimizer]") {
  const int d = GENERATE(1, 2, 3, 7);
  const adamw_config cfg{0.9f, 0.95f, 1e-8f, 0.1f};
  auto reference = make_params(17);
  adamw plain(cfg, reference);
  replica_set set(reference, cfg, d);
  auto& replicas = set.params;
  auto& opts = set.opts;
  for (auto& o : opts) {
    o->keep_value_shards();
    for (int b = 0; b < int(kBuckets.size()); ++b) o->release_values(b);
  }
  for (auto& rep : replicas)
    for (auto& p : rep) REQUIRE_FALSE(p->value.defined());
  int64_t held = 0;
  for (auto& o : opts) held += o->value_shard_bytes();
  CHECK(held == 4 * (35 + 5 + 33 + 13 + 1));  // each element on one replica
  rng gr(9, 0);
  for (int step = 0; step < 4; ++step) {
    set.fill_gradients(reference, gr);
    plain.step(1e-2f, 1.0f, true);
    for (auto& o : opts) o->step(1e-2f, 1.0f, true);
    for (int b = 0; b < int(kBuckets.size()); ++b) {  // a node's all-gather, then its release
      const tensor flat = gathered(opts, b);
      for (auto& o : opts) o->unpack_values(b, flat);
      for (auto& rep : replicas)
        for (int p : kBuckets[size_t(b)]) {
          INFO("d " << d << " step " << step << " parameter " << reference[size_t(p)]->spec.name);
          REQUIRE(same_bits(rep[size_t(p)]->value, reference[size_t(p)]->value));
        }
      for (auto& o : opts) o->release_values(b);
    }
  }
  // A checkpoint's values loaded into the parameters become the shards.
  auto loaded = make_params(23);
  for (int r = 0; r < d; ++r) {
    for (size_t i = 0; i < loaded.size(); ++i) replicas[size_t(r)][i]->value = loaded[i]->value.clone();
    opts[size_t(r)]->take_owned_values();
    for (int b = 0; b < int(kBuckets.size()); ++b) opts[size_t(r)]->release_values(b);
  }
  for (int b = 0; b < int(kBuckets.size()); ++b) {
    opts[0]->unpack_values(b, gathered(opts, b));
    for (int p : kBuckets[size_t(b)])
      REQUIRE(same_bits(replicas[0][size_t(p)]->value, loaded[size_t(p)]->value));
  }
  // One parameter at a time (a resume's load): values and moments of
  // another checkpoint reach the same slices, the parameters stay released.
  auto again = make_params(29);
  for (auto& o : opts)
    for (int b = 0; b < int(kBuckets.size()); ++b) o->release_values(b);
  for (int r = 0; r < d; ++r)
    for (size_t i = 0; i < again.size(); ++i) {
      tensor m = again[i]->value.clone(), v = again[i]->value.clone();
      for (int64_t j = 0; j < v.numel(); ++j) v.f32()[j] = std::abs(v.f32()[j]) + float(j);
      opts[size_t(r)]->load_parameter(int(i), &again[i]->value, m, v);
      REQUIRE_FALSE(replicas[size_t(r)][i]->value.defined());
    }
  for (int b = 0; b < int(kBuckets.size()); ++b) {
    opts[0]->unpack_values(b, gathered(opts, b));
    for (int p : kBuckets[size_t(b)])
      REQUIRE(same_bits(replicas[0][size_t(p)]->value, again[size_t(p)]->value));
    for (auto& o : opts)
      for (auto& pc : o->owned_pieces(b)) {
        auto [pm, pv] = o->piece_moments(b, pc);
        for (int64_t j = pc.begin; j < pc.end; ++j) {
          const float x = again[size_t(pc.param)]->value.f32()[j];
          REQUIRE(pm[j - pc.begin] == x);
          REQUIRE(pv[j - pc.begin] == std::abs(x) + float(j));
        }
      }
  }
  CHECK_THROWS_AS(opts[0]->load_parameter(0, nullptr, again[1]->value, again[1]->value),
                  merak::error);
}

TEST_CASE("distributed AdamW: the exact ranges of a bucket are its parameters not read rounded",
          "[model][optimizer][sharding]") {
  auto params = make_params(9);
  // Bucket {4, 3}: d (1 element) then c.weight (13); bucket {1, 0}: a.bias
  // (5) then a.weight (35).
  note_reads(*params[0], true);   // a.weight: a GEMM weight
  note_reads(*params[3], true);   // c.weight: rounded by one reader ...
  note_reads(*params[3], false);  // ... and read as float by another
  note_reads(*params[2], true);   // b.weight
  distributed_adamw opt({}, params, kBuckets, 2, 0);
  using ranges = std::vector<std::pair<size_t, size_t>>;
  REQUIRE(opt.exact_ranges(0) == ranges{{0, 14}});  // d and c.weight, merged
  REQUIRE(opt.exact_ranges(1).empty());             // b.weight alone
  REQUIRE(opt.exact_ranges(2) == ranges{{0, 5}});   // a.bias; a.weight travels as bf16
}
