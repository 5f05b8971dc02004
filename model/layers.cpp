#include "model/layers.hpp"

#include <algorithm>

#include "core/error.hpp"
#include "model/backend.hpp"
#include "model/layer_helpers.hpp"

namespace merak::model::layers {
namespace {

using namespace detail;

class embedding_layer final : public layer {
 public:
  embedding_layer(parameter_ptr wte, parameter_ptr wpe, int valid)
      : wte_(std::move(wte)), wpe_(std::move(wpe)), valid_(valid) {
    note_reads(*wte_, false);  // the encoder adds the tables in float
  }
  shape_t output_shape(std::span<const shape_t> in) const override {
    if (in[0].size() != 2) fail("embedding expects token ids (B, T), got {}", shape_str(in[0]));
    if (in[0][1] > wpe_->value.dim(0))
      fail("sequence length {} exceeds the position table ({})", in[0][1], wpe_->value.dim(0));
    return {in[0][0], in[0][1], wte_->value.dim(1)};
  }
  void forward(std::span<const tensor* const> in, tensor& out, stash&) override {
    check_ids(*in[0], valid_, "token");
    on(out).encoder_forward(out, *in[0], wte_->value, wpe_->value);
  }
  void backward(std::span<const tensor* const> in, const tensor& dout, std::span<tensor* const>,
                stash&) override {
    on(dout).encoder_backward(wte_->grad, wpe_->grad, dout, *in[0]);
  }

 private:
  parameter_ptr wte_, wpe_;
  int valid_;
};

// The backend's encoder adds a position table; this layer passes it a zero
// table of (T, C) from the stash, whose gradient in backward is discarded.
class token_embedding_layer final : public layer {
 public:
  token_embedding_layer(parameter_ptr wte, int valid) : wte_(std::move(wte)), valid_(valid) {
    note_reads(*wte_, false);
  }
  shape_t output_shape(std::span<const shape_t> in) const override {
    if (in[0].size() != 2) fail("embedding expects token ids (B, T), got {}", shape_str(in[0]));
    return {in[0][0], in[0][1], wte_->value.dim(1)};
  }
  void forward(std::span<const tensor* const> in, tensor& out, stash& st) override {
    check_ids(*in[0], valid_, "token");
    tensor& zero_positions = st.add({in[0]->dim(1), wte_->value.dim(1)});  // (T, C)
    zero_positions.fill_zero();
    on(out).encoder_forward(out, *in[0], wte_->value, zero_positions);
  }
  void backward(std::span<const tensor* const> in, const tensor& dout, std::span<tensor* const>,
                stash& st) override {
    on(dout).encoder_backward(wte_->grad, st.tensors[0], dout, *in[0]);
  }

 private:
  parameter_ptr wte_;
  int valid_;
};

class layernorm_layer final : public layer {
 public:
  layernorm_layer(parameter_ptr w, parameter_ptr b) : w_(std::move(w)), b_(std::move(b)) {}
  shape_t output_shape(std::span<const shape_t> in) const override {
    expect_features(in[0], w_->value.numel(), "layernorm");
    return in[0];
  }
  void forward(std::span<const tensor* const> in, tensor& out, stash& st) override {
    int64_t N = rows(*in[0]);
    st.add({N});  // mean
    st.add({N});  // rstd
    on(out).layernorm_forward(out, st.tensors[0], st.tensors[1], *in[0], w_->value, b_->value);
  }
  void backward(std::span<const tensor* const> in, const tensor& dout, std::span<tensor* const> din,
                stash& st) override {
    on(dout).layernorm_backward(*din[0], w_->grad, b_->grad, dout, *in[0], w_->value, st.tensors[0],
                                st.tensors[1]);
  }

 private:
  parameter_ptr w_, b_;
};

// With bf16 activations the GEMM reads a bf16 copy of the float master
// weight, made on first use after parameters_changed(), or the parameter's
// own rounded value where only that is held (parameter::lowp).
class linear_layer final : public layer {
 public:
  linear_layer(parameter_ptr w, parameter_ptr b) : w_(std::move(w)), b_(std::move(b)) {
    note_reads(*w_, true);  // weight_for: bf16 activations read the rounded copy
    if (b_) note_reads(*b_, false);
  }
  shape_t output_shape(std::span<const shape_t> in) const override {
    expect_features(in[0], w_->spec.shape[1], "linear");
    return with_features(in[0], {w_->spec.shape[0]});
  }
  void forward(std::span<const tensor* const> in, tensor& out, stash&) override {
    on(out).matmul_forward(out, *in[0], weight_for(*in[0]), b_ ? &b_->value : nullptr);
  }
  void backward(std::span<const tensor* const> in, const tensor& dout, std::span<tensor* const> din,
                stash&) override {
    on(dout).matmul_backward(din[0], &w_->grad, b_ ? &b_->grad : nullptr, dout, *in[0],
                             weight_for(*in[0]));
  }
  // Split: the input gradient and the bias (a column sum) first, the weight
  // gradient's GEMM later.
  bool splits_weight_grad() const override { return true; }
  void backward_input(std::span<const tensor* const> in, const tensor& dout,
                      std::span<tensor* const> din, stash&) override {
    on(dout).matmul_backward(din[0], nullptr, b_ ? &b_->grad : nullptr, dout, *in[0],
                             weight_for(*in[0]));
  }
  void backward_weight(std::span<const tensor* const> in, const tensor& dout) override {
    on(dout).matmul_backward(nullptr, &w_->grad, nullptr, dout, *in[0], weight_for(*in[0]));
  }
  void parameters_changed() override { copy_stale_ = true; }
  void drop_derived() override {
    copy_ = tensor();
    copy_stale_ = true;
  }

 private:
  const tensor& weight_for(const tensor& x) {
    if (w_->lowp.defined() && w_->lowp.type() == x.type()) return w_->lowp;
    if (x.type() == w_->value.type()) return w_->value;
    if (copy_stale_ || !copy_.defined() || copy_.type() != x.type()) {
      if (!copy_.defined() || copy_.type() != x.type())
        copy_ = tensor(w_->value.shape(), x.type(), w_->value.where());
      on(copy_).copy(copy_, w_->value);
      copy_stale_ = false;
    }
    return copy_;
  }

  parameter_ptr w_, b_;  // b_ may be null
  tensor copy_;          // the weight in the activations' type, if not float
  bool copy_stale_ = true;
};

// Heads are counted from the input: a tensor-parallel shard gets the qkv of
// its own heads only, (B, T, 3 * C / tp), and runs the same layer. With
// grouped-query attention (per_group = NH / G query heads share a K/V head)
// the input is (B, T, (per_group + 2) x G x head_size) and G is counted the
// same way.
class attention_layer final : public layer {
 public:
  attention_layer(int head_size, int per_group) : hs_(head_size), per_group_(per_group) {}
  shape_t output_shape(std::span<const shape_t> in) const override {
    const int64_t unit = int64_t(per_group_ + 2) * hs_;  // one group's channels
    if (in[0].size() != 3 || in[0][2] % unit != 0) {
      if (per_group_ == 1)
        fail("attention expects qkv (B, T, 3 x heads x {}), got {}", hs_, shape_str(in[0]));
      fail("attention expects qkv (B, T, {} x groups x {}), got {}", per_group_ + 2, hs_,
           shape_str(in[0]));
    }
    return with_features(in[0], {in[0][2] / unit * per_group_ * hs_});
  }
  bool set_recompute_core(bool on) override {
    recompute_core_ = on;
    return true;
  }
  void forward(std::span<const tensor* const> in, tensor& out, stash& st) override {
    run_forward(*in[0], out, st);
    if (recompute_core_) st.clear();  // rebuilt by backward
  }
  void backward(std::span<const tensor* const> in, const tensor& dout, std::span<tensor* const> din,
                stash& st) override {
    const int NH = int(dout.dim(2)) / hs_;
    if (recompute_core_) {  // the probabilities again; the output is not needed
      st.tensors.reserve(2);  // `again` stays where it is while run_forward appends
      tensor& again = st.add(dout.shape(), dout.type());
      run_forward(*in[0], again, st);
      std::swap(st.tensors[0], st.tensors[1]);  // the probabilities first, as forward leaves them
    }
    if (per_group_ == 1)
      on(dout).attention_backward(*din[0], dout, *in[0], st.tensors[0], NH);
    else
      on(dout).gqa_attention_backward(*din[0], dout, *in[0], st.tensors[0], NH, NH / per_group_);
  }

 private:
  // out <- attention over qkv; appends the probabilities (or the backend's
  // own stash) to st.
  void run_forward(const tensor& qkv, tensor& out, stash& st) {
    int B = int(qkv.dim(0)), T = int(qkv.dim(1)), NH = int(out.dim(2)) / hs_;
    const auto kind = on(out).attention_stash_for(B, NH, T, hs_, qkv.type());
    tensor& att = st.add(kind.shape, kind.type);
    if (per_group_ == 1)
      on(out).attention_forward(out, att, qkv, NH);
    else
      on(out).gqa_attention_forward(out, att, qkv, NH, NH / per_group_);
  }

  int hs_;
  int per_group_;  // query heads per K/V head
  bool recompute_core_ = false;
};

// Forward copies, backward adds: the executor does the TP sum (tp_comm).
class identity_layer final : public layer {
 public:
  shape_t output_shape(std::span<const shape_t> in) const override { return in[0]; }
  void forward(std::span<const tensor* const> in, tensor& out, stash&) override {
    on(out).copy(out, *in[0]);
  }
  void backward(std::span<const tensor* const>, const tensor& dout, std::span<tensor* const> din,
                stash&) override {
    on(dout).accumulate(*din[0], dout);
  }
};

class bias_layer final : public layer {
 public:
  explicit bias_layer(parameter_ptr b) : b_(std::move(b)) {}
  shape_t output_shape(std::span<const shape_t> in) const override {
    expect_features(in[0], b_->value.numel(), "bias");
    return in[0];
  }
  void forward(std::span<const tensor* const> in, tensor& out, stash&) override {
    on(out).bias_forward(out, *in[0], b_->value);
  }
  void backward(std::span<const tensor* const>, const tensor& dout, std::span<tensor* const> din,
                stash&) override {
    on(dout).bias_backward(din[0], b_->grad, dout);
  }

 private:
  parameter_ptr b_;
};

class gelu_layer final : public layer {
 public:
  shape_t output_shape(std::span<const shape_t> in) const override { return in[0]; }
  void forward(std::span<const tensor* const> in, tensor& out, stash&) override {
    on(out).gelu_forward(out, *in[0]);
  }
  void backward(std::span<const tensor* const> in, const tensor& dout, std::span<tensor* const> din,
                stash&) override {
    on(dout).gelu_backward(*din[0], *in[0], dout);
  }
};

class residual_layer final : public layer {
 public:
  shape_t output_shape(std::span<const shape_t> in) const override {
    if (in[0] != in[1]) fail("residual add of {} and {}", shape_str(in[0]), shape_str(in[1]));
    return in[0];
  }
  void forward(std::span<const tensor* const> in, tensor& out, stash&) override {
    on(out).residual_forward(out, *in[0], *in[1]);
  }
  void backward(std::span<const tensor* const>, const tensor& dout, std::span<tensor* const> din,
                stash&) override {
    on(dout).residual_backward(*din[0], *din[1], dout);
  }
};

class cross_entropy_layer final : public layer {
 public:
  cross_entropy_layer(int V, int valid) : V_(V), valid_(valid) {}
  shape_t output_shape(std::span<const shape_t> in) const override {
    expect_features(in[0], V_, "cross_entropy");
    if (in[1] != shape_t{in[0][0], in[0][1]})
      fail("targets {} do not match logits {}", shape_str(in[1]), shape_str(in[0]));
    return in[1];
  }
  void forward(std::span<const tensor* const> in, tensor& out, stash& st) override {
    check_ids(*in[1], valid_, "target");
    st.add({rows(*in[0]), V_});  // probabilities, float
    on(out).crossentropy_forward(out, st.tensors[0], *in[0], *in[1], valid_);
  }
  void backward(std::span<const tensor* const> in, const tensor& dout, std::span<tensor* const> din,
                stash& st) override {
    on(dout).crossentropy_backward(*din[0], dout, st.tensors[0], *in[1]);
  }

 private:
  int V_, valid_;
};

}  // namespace

int embedding(graph& g, const std::string& name, int tokens, int V, int max_T, int C,
              const std::string& wte, const std::string& wpe, int valid) {
  if (valid <= 0 || valid > V) valid = V;
  node_info n;
  n.name = name;
  n.kind = "embedding";
  n.inputs = {tokens};
  n.params = {{wte, {V, C}}, {wpe, {max_T, C}, init_kind::normal, 0.01f}};
  n.tp = tp_split::vocab;
  n.vocab = valid;
  n.flops_per_token = C;
  n.activation_bytes_per_token = C * act(g);
  n.make = [valid](std::span<const parameter_ptr> p) {
    return std::make_unique<embedding_layer>(p[0], p[1], valid);
  };
  return g.add_node(std::move(n), {C}, g.activation_type());
}

int token_embedding(graph& g, const std::string& name, int tokens, int V, int C,
                    const std::string& wte, int valid) {
  if (valid <= 0 || valid > V) valid = V;
  node_info n;
  n.name = name;
  n.kind = "embedding";
  n.inputs = {tokens};
  n.params = {{wte, {V, C}}};
  n.tp = tp_split::vocab;
  n.vocab = valid;
  n.flops_per_token = C;
  n.activation_bytes_per_token = C * act(g) + C * kF32;
  n.make = [valid](std::span<const parameter_ptr> p) {
    return std::make_unique<token_embedding_layer>(p[0], valid);
  };
  return g.add_node(std::move(n), {C}, g.activation_type());
}

int layernorm(graph& g, const std::string& name, int x, int C) {
  node_info n;
  n.name = name;
  n.kind = "layernorm";
  n.inputs = {x};
  n.params = {{name + ".weight", {C}, init_kind::ones, 0, false},
              {name + ".bias", {C}, init_kind::zeros, 0, false}};
  n.flops_per_token = 8.0 * C;
  n.activation_bytes_per_token = C * act(g) + 2 * kF32;
  n.make = [](std::span<const parameter_ptr> p) {
    return std::make_unique<layernorm_layer>(p[0], p[1]);
  };
  return g.add_node(std::move(n), {C}, g.activation_type());
}

int linear(graph& g, const std::string& name, int x, int C, int OC, tp_split tp, float stddev,
           bool bias) {
  node_info n;
  n.name = name;
  n.kind = "linear";
  n.inputs = {x};
  n.params = {{name + ".weight", {OC, C}, init_kind::normal, stddev, true}};
  if (bias) n.params.push_back({name + ".bias", {OC}, init_kind::zeros, 0, false});
  n.flops_per_token = 2.0 * C * OC;
  n.activation_bytes_per_token = OC * act(g);
  n.tp = tp;
  n.make = [](std::span<const parameter_ptr> p) {
    return std::make_unique<linear_layer>(p[0], p.size() > 1 ? p[1] : nullptr);
  };
  return g.add_node(std::move(n), {OC}, g.activation_type());
}

namespace {

// A causal attention node over a fused qkv: `NH` query heads of C / NH
// channels, each group of `per_group` of them sharing one K/V head.
node_info attention_node(const graph& g, const std::string& name, int qkv, int C, int NH,
                         int per_group, int max_T) {
  node_info n;
  n.name = name;
  n.kind = "attention";
  n.inputs = {qkv};
  // Q K^T and P V over the causal triangle (about T/2 keys per query).
  n.flops_per_token = 2.0 * 2.0 * C * (max_T + 1) / 2.0;
  n.activation_bytes_per_token = (C + int64_t(NH) * max_T) * act(g);
  n.make = [hs = C / NH, per_group](std::span<const parameter_ptr>) {
    return std::make_unique<attention_layer>(hs, per_group);
  };
  return n;
}

}  // namespace

int causal_attention(graph& g, const std::string& name, int qkv, int C, int NH, int max_T) {
  if (C % NH != 0) fail("heads ({}) must divide dim ({})", NH, C);
  node_info n = attention_node(g, name, qkv, C, NH, 1, max_T);
  n.tp = tp_split::heads;
  n.heads = NH;
  return g.add_node(std::move(n), {C}, g.activation_type());
}

int grouped_query_attention(graph& g, const std::string& name, int qkv, int C, int NH, int groups,
                            int max_T) {
  if (NH < 1 || C % NH != 0) fail("heads ({}) must divide dim ({})", NH, C);
  if (groups < 1 || NH % groups != 0) fail("query groups ({}) must divide heads ({})", groups, NH);
  if (groups == NH) return causal_attention(g, name, qkv, C, NH, max_T);
  node_info n = attention_node(g, name, qkv, C, NH, NH / groups, max_T);
  n.tp = tp_split::heads;
  n.heads = NH;
  n.kv_heads = groups;
  n.regroup = [hs = C / NH](int per_group) -> layer_factory {
    return [hs, per_group](std::span<const parameter_ptr>) {
      return std::make_unique<attention_layer>(hs, per_group);
    };
  };
  return g.add_node(std::move(n), {C}, g.activation_type());
}

int gelu(graph& g, const std::string& name, int x, int C) {
  node_info n;
  n.name = name;
  n.kind = "gelu";
  n.inputs = {x};
  n.flops_per_token = 10.0 * C;
  n.activation_bytes_per_token = C * act(g);
  n.make = [](std::span<const parameter_ptr>) { return std::make_unique<gelu_layer>(); };
  return g.add_node(std::move(n), {C}, g.activation_type());
}

int residual(graph& g, const std::string& name, int a, int b, int C) {
  node_info n;
  n.name = name;
  n.kind = "residual";
  n.inputs = {a, b};
  n.flops_per_token = C;
  n.activation_bytes_per_token = C * act(g);
  n.make = [](std::span<const parameter_ptr>) { return std::make_unique<residual_layer>(); };
  return g.add_node(std::move(n), {C}, g.activation_type());
}

int lm_head(graph& g, const std::string& name, int x, int C, int V,
            const std::string& tied_weight) {
  node_info n;
  n.name = name;
  n.kind = "linear";
  n.inputs = {x};
  n.params = {{tied_weight, {V, C}, init_kind::normal, 0.02f, true}};
  n.flops_per_token = 2.0 * C * V;
  n.activation_bytes_per_token = V * act(g);
  n.tp = tp_split::vocab;
  n.make = [](std::span<const parameter_ptr> p) {
    return std::make_unique<linear_layer>(p[0], nullptr);
  };
  return g.add_node(std::move(n), {V}, g.activation_type());
}

namespace {

int tp_identity(graph& g, const std::string& name, int x, int C, tp_comm comm, dtype type) {
  node_info n;
  n.name = name;
  n.kind = comm == tp_comm::copy ? "tp_copy" : "tp_reduce";
  n.inputs = {x};
  n.activation_bytes_per_token = C * int64_t(dtype_size(type));
  n.comm = comm;
  n.make = [](std::span<const parameter_ptr>) { return std::make_unique<identity_layer>(); };
  return g.add_node(std::move(n), {C}, type);
}

}  // namespace

int tp_copy(graph& g, const std::string& name, int x, int C) {
  return tp_identity(g, name, x, C, tp_comm::copy, g.activation_type());
}

int tp_reduce(graph& g, const std::string& name, int x, int C) {
  return tp_identity(g, name, x, C, tp_comm::reduce, g.activation_type());
}

int tp_reduce(graph& g, const std::string& name, int x, int C, dtype type) {
  return tp_identity(g, name, x, C, tp_comm::reduce, type);
}

namespace {

// Slice `rank` of `tp` of a whole value: elements [rank n/tp, (rank+1) n/tp).
int64_t slice_offset(const tensor& whole, int tp, int rank) {
  return whole.numel() / tp * rank;
}

shape_t sequence_shape(const shape_t& in, int64_t num, int64_t den, const char* what) {
  if (in.size() != 3 || (in[1] * num) % den != 0)
    fail("sequence parallelism {} expects (B, T, C) with T divisible by {}, got {}", what, den,
         shape_str(in));
  return {in[0], in[1] * num / den, in[2]};
}

// sp_enter, sp_reduce: forward keeps the shard's slice of the whole input
// (the executor has reduce-scattered it first for sp_reduce); backward gets
// the whole gradient (the executor all-gathers the slices) and adds it.
class sp_slice_layer final : public layer {
 public:
  sp_slice_layer(int tp, int rank) : tp_(tp), rank_(rank) {}
  shape_t output_shape(std::span<const shape_t> in) const override {
    return sequence_shape(in[0], 1, tp_, "slice");
  }
  void forward(std::span<const tensor* const> in, tensor& out, stash&) override {
    copy_bytes(out, 0, *in[0], size_t(slice_offset(*in[0], tp_, rank_)) * dtype_size(out.type()),
               out.bytes());
  }
  void backward(std::span<const tensor* const>, const tensor& dout, std::span<tensor* const> din,
                stash&) override {
    if (din[0]) on(dout).accumulate(*din[0], dout);
  }

 private:
  int tp_, rank_;
};

// sp_gather, sp_exit: forward gets the whole value (the executor
// all-gathers the slices) and copies it; backward adds the shard's slice of
// the whole gradient (reduce-scattered first for sp_gather).
class sp_whole_layer final : public layer {
 public:
  sp_whole_layer(int tp, int rank) : tp_(tp), rank_(rank) {}
  shape_t output_shape(std::span<const shape_t> in) const override {
    return sequence_shape(in[0], tp_, 1, "gather");
  }
  void forward(std::span<const tensor* const> in, tensor& out, stash&) override {
    on(out).copy(out, *in[0]);
  }
  void backward(std::span<const tensor* const>, const tensor& dout, std::span<tensor* const> din,
                stash&) override {
    if (!din[0]) return;
    tensor mine(din[0]->shape(), dout.type(), dout.where());
    copy_bytes(mine, 0, dout, size_t(slice_offset(dout, tp_, rank_)) * dtype_size(dout.type()),
               mine.bytes());
    on(dout).accumulate(*din[0], mine);
  }

 private:
  int tp_, rank_;
};

}  // namespace

int sp_node(graph& g, const std::string& name, int x, int C, tp_comm comm, int tp, int rank) {
  node_info n;
  n.name = name;
  n.inputs = {x};
  n.comm = comm;
  const bool to_slice = comm == tp_comm::sp_enter || comm == tp_comm::sp_reduce;
  MERAK_CHECK(to_slice || comm == tp_comm::sp_gather || comm == tp_comm::sp_exit,
              "sp_node '{}' of a communication that is not sequence parallelism's", name);
  n.kind = comm == tp_comm::sp_enter    ? "sp_enter"
           : comm == tp_comm::sp_reduce ? "sp_reduce"
           : comm == tp_comm::sp_gather ? "sp_gather"
                                        : "sp_exit";
  // Per token of the whole sequence: the output kept, a slice or the whole;
  // sp_gather's whole output is freed once its reader ran forward and
  // gathered again for its backward (model::executor).
  n.activation_bytes_per_token = to_slice                     ? C * act(g) / tp
                                 : comm == tp_comm::sp_gather ? 0
                                                              : C * act(g);
  if (to_slice)
    n.make = [tp, rank](std::span<const parameter_ptr>) {
      return std::make_unique<sp_slice_layer>(tp, rank);
    };
  else
    n.make = [tp, rank](std::span<const parameter_ptr>) {
      return std::make_unique<sp_whole_layer>(tp, rank);
    };
  return g.add_node(std::move(n), {C}, g.activation_type());
}

int bias_add(graph& g, const std::string& name, int x, int C, const param_spec& bias) {
  node_info n;
  n.name = name;
  n.kind = "bias";
  n.inputs = {x};
  n.params = {bias};
  n.flops_per_token = C;
  n.activation_bytes_per_token = C * act(g);
  n.make = [](std::span<const parameter_ptr> p) { return std::make_unique<bias_layer>(p[0]); };
  return g.add_node(std::move(n), {C}, g.activation_type());
}

int cross_entropy(graph& g, const std::string& name, int logits, int targets, int V, int valid) {
  if (valid <= 0) valid = V;
  if (valid > V) fail("cross_entropy '{}': {} valid ids of {} logits", name, valid, V);
  node_info n;
  n.name = name;
  n.kind = "cross_entropy";
  n.inputs = {logits, targets};
  n.tp = tp_split::vocab;
  n.vocab = valid;
  n.flops_per_token = 5.0 * V;
  n.activation_bytes_per_token = (V + 1) * kF32;
  n.make = [V, valid](std::span<const parameter_ptr>) {
    return std::make_unique<cross_entropy_layer>(V, valid);
  };
  return g.add_node(std::move(n), {});
}

}  // namespace merak::model::layers
