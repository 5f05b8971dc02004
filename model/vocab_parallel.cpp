// Vocabulary parallelism (layers.hpp): the token embedding and the loss of
// a shard that holds a contiguous range of the vocabulary.
#include <memory>

#include "core/error.hpp"
#include "model/backend.hpp"
#include "model/layer_helpers.hpp"
#include "model/layers.hpp"

namespace merak::model::layers {
namespace {

using namespace detail;

class embedding_shard_layer final : public layer {
 public:
  embedding_shard_layer(parameter_ptr wte, parameter_ptr wpe, int vocab, int first,
                        bool add_positions)
      : wte_(std::move(wte)),
        wpe_(std::move(wpe)),
        vocab_(vocab),
        first_(first),
        add_positions_(add_positions) {
    note_reads(*wte_, false);  // rows are added to the positions in float
  }
  shape_t output_shape(std::span<const shape_t> in) const override {
    if (in[0].size() != 2) fail("embedding expects token ids (B, T), got {}", shape_str(in[0]));
    if (wpe_ && in[0][1] > wpe_->value.dim(0))
      fail("sequence length {} exceeds the position table ({})", in[0][1], wpe_->value.dim(0));
    return {in[0][0], in[0][1], wte_->value.dim(1)};
  }
  void forward(std::span<const tensor* const> in, tensor& out, stash&) override {
    check_ids(*in[0], vocab_, "token");
    on(out).embedding_shard_forward(out, *in[0], wte_->value,
                                    wpe_ && add_positions_ ? &wpe_->value : nullptr, first_);
  }
  void backward(std::span<const tensor* const> in, const tensor& dout, std::span<tensor* const>,
                stash&) override {
    on(dout).embedding_shard_backward(wte_->grad, wpe_ ? &wpe_->grad : nullptr, dout, *in[0],
                                      first_);
  }

 private:
  parameter_ptr wte_, wpe_;
  int vocab_, first_;
  bool add_positions_;
};

// logits (B,T,Vs), targets -> the shard's stats (B,T,2 parts). Its backward
// adds nothing: the loss layer gives the logits their whole gradient.
class vocab_stats_layer final : public layer {
 public:
  vocab_stats_layer(int first, int valid, int part, int parts)
      : first_(first), valid_(valid), part_(part), parts_(parts) {}
  shape_t output_shape(std::span<const shape_t> in) const override {
    if (in[0].size() != 3 || in[1] != shape_t{in[0][0], in[0][1]})
      fail("vocabulary-parallel cross-entropy expects logits (B, T, V) and targets (B, T), got {} "
           "and {}",
           shape_str(in[0]), shape_str(in[1]));
    return with_features(in[0], {2 * int64_t(parts_)});
  }
  void forward(std::span<const tensor* const> in, tensor& out, stash&) override {
    on(out).vocab_ce_stats(out, *in[0], *in[1], first_, valid_, part_);
  }
  void backward(std::span<const tensor* const>, const tensor&, std::span<tensor* const>,
                stash&) override {}

 private:
  int first_, valid_, part_, parts_;
};

// logits (B,T,Vs), summed stats, targets -> losses (B,T).
class vocab_loss_layer final : public layer {
 public:
  vocab_loss_layer(int first, int valid) : first_(first), valid_(valid) {}
  shape_t output_shape(std::span<const shape_t> in) const override { return in[2]; }
  void forward(std::span<const tensor* const> in, tensor& out, stash&) override {
    check_ids(*in[2], valid_, "target");
    on(out).vocab_ce_loss(out, *in[1]);
  }
  void backward(std::span<const tensor* const> in, const tensor& dout, std::span<tensor* const> din,
                stash&) override {
    if (din[0]) on(dout).vocab_ce_backward(*din[0], dout, *in[0], *in[1], *in[2], first_, valid_);
  }

 private:
  int first_, valid_;
};

}  // namespace

int embedding_shard(graph& g, const std::string& name, int tokens, int vocab,
                    const param_spec& wte, const param_spec* wpe, int first, bool add_positions) {
  const int C = int(wte.shape.at(1));
  node_info n;
  n.name = name;
  n.kind = "embedding";
  n.inputs = {tokens};
  n.params = {wte};
  if (wpe) n.params.push_back(*wpe);
  n.tp = tp_split::vocab;
  n.flops_per_token = C;
  n.activation_bytes_per_token = C * act(g);
  n.make = [vocab, first, add_positions](std::span<const parameter_ptr> p) {
    return std::make_unique<embedding_shard_layer>(p[0], p.size() > 1 ? p[1] : nullptr, vocab,
                                                   first, add_positions);
  };
  return g.add_node(std::move(n), {C}, g.activation_type());
}

int vocab_parallel_cross_entropy(graph& g, const std::string& name, int logits, int targets,
                                 int first, int valid, int tp, int rank) {
  const int Vs = int(g.values()[size_t(logits)].features.back());
  node_info s;
  s.name = name + ".stats";
  s.kind = "vocab_stats";
  s.inputs = {logits, targets};
  s.tp = tp_split::vocab;
  s.flops_per_token = 3.0 * Vs;
  s.activation_bytes_per_token = 2 * tp * kF32;
  s.make = [first, valid, rank, tp](std::span<const parameter_ptr>) {
    return std::make_unique<vocab_stats_layer>(first, valid, rank, tp);
  };
  int stats = g.add_node(std::move(s), {2 * int64_t(tp)}, dtype::f32);
  stats = tp_reduce(g, name + ".stats.tp_reduce", stats, 2 * tp, dtype::f32);
  node_info n;
  n.name = name;
  n.kind = "cross_entropy";
  n.inputs = {logits, stats, targets};
  n.tp = tp_split::vocab;
  n.vocab = valid;
  n.flops_per_token = 2.0 * Vs;
  n.activation_bytes_per_token = kF32;
  n.make = [first, valid](std::span<const parameter_ptr>) {
    return std::make_unique<vocab_loss_layer>(first, valid);
  };
  return g.add_node(std::move(n), {});
}

}  // namespace merak::model::layers
