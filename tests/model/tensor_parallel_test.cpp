// Tensor parallelism at the executor level: shards of the TP rewrite, run on
// threads with a blocking shared-memory sum, give the single-device loss and
// gradients at every sub-pipelining level, with and without checkpointing.
// (The actor runtime's TP groups sum over comm/; see the actors tests.)
#include <catch2/catch.hpp>

#include <barrier>
#include <cmath>
#include <cstring>
#include <map>
#include <thread>

#include "model/executor.hpp"
#include "model/gpt.hpp"
#include "partition/tp_rewrite.hpp"
#include "tests/model/test_util.hpp"

using namespace merak;
using namespace merak::model;

namespace {

// Sums in rank order at a barrier: every shard gets the same bits.
struct shared_sum {
  explicit shared_sum(int n) : size(n), slots(n), sync(n) {}
  int size;
  std::vector<tensor*> slots;
  std::barrier<> sync;
};

class barrier_group final : public tp_group {
 public:
  barrier_group(shared_sum& s, int rank) : s_(s), rank_(rank) {}
  int size() const override { return s_.size; }
  int rank() const override { return rank_; }
  // The sum in rank order; this rank's slice of it.
  int start_reduce_scatter(tensor& t) override {
    tensor whole = t.clone();
    start_allreduce(whole);
    const int64_t n = t.numel() / s_.size;
    copy_bytes(t, size_t(n * rank_) * dtype_size(t.type()), whole,
               size_t(n * rank_) * dtype_size(t.type()), size_t(n) * dtype_size(t.type()));
    return calls;
  }
  int start_allgather(tensor& t) override {
    s_.slots[rank_] = &t;
    s_.sync.arrive_and_wait();
    const size_t n = t.bytes() / size_t(s_.size);
    for (int r = 0; r < s_.size; ++r)
      if (r != rank_) copy_bytes(t, n * size_t(r), *s_.slots[r], n * size_t(r), n);
    s_.sync.arrive_and_wait();  // everyone has read every slot
    return ++calls;
  }
  int start_allreduce(tensor& t) override {
    s_.slots[rank_] = &t;
    s_.sync.arrive_and_wait();
    std::vector<float> sum(size_t(t.numel()), 0.f);
    for (int r = 0; r < s_.size; ++r) {
      const tensor& x = *s_.slots[r];
      for (size_t i = 0; i < sum.size(); ++i)
        sum[i] += x.type() == dtype::bf16 ? to_f32(x.bf16s()[i]) : x.f32()[i];
    }
    s_.sync.arrive_and_wait();  // everyone has read every slot
    for (size_t i = 0; i < sum.size(); ++i)
      if (t.type() == dtype::bf16)
        t.bf16s()[i] = to_bf16(sum[i]);
      else
        t.f32()[i] = sum[i];
    ++calls;
    return calls;
  }
  void wait(int) override {}
  int calls = 0;

 private:
  shared_sum& s_;
  int rank_;
};

std::vector<tensor> inputs(int B, int T, int V, uint64_t seed) {
  std::vector<tensor> v;
  v.push_back(test::random_ids({B, T}, V, seed));
  v.push_back(test::random_ids({B, T}, V, seed + 1));
  return v;
}

double rel_diff(const tensor& a, const tensor& b) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    double d = double(a.f32()[i]) - b.f32()[i];
    num += d * d;
    den += double(b.f32()[i]) * b.f32()[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

}  // namespace

TEST_CASE("the TP rewrite splits each column/row pair and keeps the rest whole", "[tp]") {
  graph g = build_gpt({.vocab = 32, .max_seq = 8, .layers = 2, .dim = 16, .heads = 4});
  auto r = partition::rewrite_for_tp(g, 2, 1);
  CHECK(r.pairs == 4);  // attention and MLP of each block
  // Per pair: tp_copy, tp_reduce and the bias node are new; the vocabulary:
  // the embedding's tp_reduce, the LM head's tp_copy, the loss's statistics
  // and their tp_reduce.
  CHECK(r.graph.nodes().size() == g.nodes().size() + 3 * 4 + 4);
  CHECK(r.node_map.size() == g.nodes().size() + 1);
  int64_t shard_params = 0;
  for (auto& n : r.graph.nodes())
    for (auto& p : n.params)
      if (p.shard.sharded()) shard_params += shape_numel(p.shape);
  CHECK(shard_params > 0);
  CHECK(partition::tp_divisibility_error(g, 3).find("does not divide") != std::string::npos);
  CHECK(partition::tp_divisibility_error(g, 8).find("heads") != std::string::npos);
  CHECK_THROWS_WITH(partition::rewrite_for_tp(g, 3, 0), Catch::Contains("h0.attn.qkv"));
}

TEST_CASE("the sequence-parallel rewrite slices the regions between the pairs", "[tp][sp]") {
  graph g = build_gpt({.vocab = 32, .max_seq = 8, .layers = 2, .dim = 16, .heads = 4});
  auto r = partition::rewrite_for_tp(g, 2, 1, true);
  std::map<std::string, int> kinds;
  int partial = 0;
  for (auto& n : r.graph.nodes()) {
    ++kinds[n.kind];
    if (n.sequence_parallel) {
      ++partial;
      CHECK((n.kind == "layernorm" || n.kind == "bias"));
    }
  }
  // Per pair sp_gather and sp_reduce instead of tp_copy and tp_reduce; the
  // vocabulary-parallel embedding's partial sums are reduce-scattered into
  // the sliced region, the LM head gathers its input like a column linear;
  // the loss statistics are all-reduced whole.
  CHECK(kinds["sp_gather"] == 4 + 1);
  CHECK(kinds["sp_reduce"] == 4 + 1);
  CHECK(kinds["sp_enter"] == 0);
  CHECK(kinds["sp_exit"] == 0);
  CHECK(kinds["tp_copy"] == 0);
  CHECK(kinds["tp_reduce"] == 1);
  CHECK(r.graph.nodes().size() == g.nodes().size() + 3 * 4 + 4);
  // Per block two LayerNorms and two row biases; and ln_f.
  CHECK(partial == 2 * 4 + 1);
  // Without --tp above 1 there is nothing to slice.
  CHECK(partition::rewrite_for_tp(g, 1, 0, true).graph.nodes().size() == g.nodes().size());
}

TEST_CASE("a parameter shard initialises to its slice of the whole parameter", "[tp]") {
  param_spec whole{"w", {6, 4}};
  tensor full(whole.shape);
  initialise(full, whole, 11);
  for (int groups : {1, 3})
    for (int dim : {0, 1}) {
      if (dim == 1 && groups == 3) continue;
      tensor back = tensor::zeros(whole.shape);
      for (int r = 0; r < 2; ++r) {
        param_spec s = whole;
        s.shard = {dim, 2, r, groups, whole.shape};
        s.shape[dim] /= 2;
        tensor part(s.shape);
        initialise(part, s, 11);
        tensor cut(s.shape);
        copy_shard(full, cut, s.shard);
        CHECK(std::memcmp(part.raw(), cut.raw(), part.bytes()) == 0);
        place_shard(back, part, s.shard);
      }
      CHECK(std::memcmp(back.raw(), full.raw(), full.bytes()) == 0);
    }
}

TEST_CASE("tensor-parallel shards give the single-device loss and gradients", "[tp]") {
  const int V = 32, T = 8, B = 4;
  graph g = build_gpt({.vocab = V, .max_seq = T, .layers = 2, .dim = 16, .heads = 4});
  parameter_store ref_store(7);
  executor ref(g, ref_store);
  double ref_loss = ref.forward(0, inputs(B, T, V, 3)).loss;
  ref.backward(0, {}, 0.5f);

  for (int tp : {2, 4})
    for (int overlap : {0, 1, 2})
      for (int ckpt : {0, 9})  // 9: through the first tp_reduce
        for (bool sp : {false, true}) {
        INFO("tp " << tp << " overlap " << overlap << " checkpoint " << ckpt << " sequence parallel "
                   << sp);
        shared_sum sum(tp);
        std::vector<partition::tp_graph> graphs;
        for (int r = 0; r < tp; ++r) graphs.push_back(partition::rewrite_for_tp(g, tp, r, sp));
        std::vector<std::unique_ptr<parameter_store>> stores;
        std::vector<double> losses(tp);
        std::vector<int> calls(tp);
        for (int r = 0; r < tp; ++r) stores.push_back(std::make_unique<parameter_store>(7));
        std::vector<std::thread> threads;
        for (int r = 0; r < tp; ++r)
          threads.emplace_back([&, r] {
            barrier_group group(sum, r);
            executor ex(graphs[r].graph, *stores[r]);
            ex.set_tp(&group, overlap);
            ex.set_checkpoint(ckpt);
            losses[r] = ex.forward(0, inputs(B, T, V, 3), true).loss;
            ex.backward(0, {}, 0.5f);
            calls[r] = group.calls;
          });
        for (auto& t : threads) t.join();
        for (int r = 0; r < tp; ++r) {
          CHECK(std::abs(losses[r] - ref_loss) < 1e-5 * std::abs(ref_loss));
          CHECK(losses[r] == losses[0]);
          CHECK(calls[r] == calls[0]);
        }
        // One sum per pair in forward and one in backward, per sub-batch,
        // and for the vocabulary the embedding's sum (forward), the LM
        // head's input gradient (backward) and the loss statistics
        // (forward); plus the recomputed forward's when checkpointed.
        // Sequence parallel: two collectives per pair each way and the
        // column linear's input gathered again before its backward, the
        // same for the LM head, the embedding's reduce-scatter (forward)
        // and all-gather (backward), the statistics, per sub-batch; and
        // one sum of each partial parameter gradient: per block the two
        // LayerNorms' weights and biases and the two row biases, and ln_f's.
        int subs = overlap > 0 ? 2 : 1;
        const int want =
            sp ? (4 * 2 * 2 + 4 + 3 + 2 + 1) * subs + 2 * 6 + 2 : (4 * 2 + 3) * subs;
        if (ckpt == 0)
          CHECK(calls[0] == want);
        else
          CHECK(calls[0] > want);
        // Gather every parameter's gradient back to its whole shape.
        for (auto& p : ref_store.all()) {
          tensor whole = tensor::zeros(p->grad.shape());
          for (int r = 0; r < tp; ++r) {
            auto q = stores[r]->find(p->spec.name);
            REQUIRE(q != nullptr);
            if (q->spec.shard.sharded())
              place_shard(whole, q->grad, q->spec.shard);
            else if (r == 0)
              std::memcpy(whole.raw(), q->grad.raw(), whole.bytes());
          }
          INFO(p->spec.name);
          CHECK(rel_diff(whole, p->grad) < 1e-5);
        }
      }
}
