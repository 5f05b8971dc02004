// The layers the Llama family adds to layers.hpp: RMSNorm, rotary position
// embedding and SwiGLU (grouped-query attention shares attention_layer in
// layers.cpp). docs/layers.md states their contracts.
#include <memory>

#include "core/error.hpp"
#include "model/backend.hpp"
#include "model/layer_helpers.hpp"
#include "model/layers.hpp"

namespace merak::model::layers {
namespace {

using namespace detail;

class rmsnorm_layer final : public layer {
 public:
  rmsnorm_layer(parameter_ptr w, float eps) : w_(std::move(w)), eps_(eps) {}
  shape_t output_shape(std::span<const shape_t> in) const override {
    expect_features(in[0], w_->value.numel(), "rmsnorm");
    return in[0];
  }
  void forward(std::span<const tensor* const> in, tensor& out, stash& st) override {
    st.add({rows(*in[0])});  // rstd
    on(out).rmsnorm_forward(out, st.tensors[0], *in[0], w_->value, eps_);
  }
  void backward(std::span<const tensor* const> in, const tensor& dout, std::span<tensor* const> din,
                stash& st) override {
    on(dout).rmsnorm_backward(*din[0], w_->grad, dout, *in[0], w_->value, st.tensors[0]);
  }

 private:
  parameter_ptr w_;
  float eps_;
};

// The input is a fused qkv, (B, T, (per_group + 2) x G x head_size); its
// first (per_group + 1) x G heads (Q and K) are rotated, V passes through.
// G is counted from the input, as in attention_layer.
class rotary_layer final : public layer {
 public:
  rotary_layer(int head_size, int per_group, float theta, int position_offset)
      : hs_(head_size), per_group_(per_group), theta_(theta), offset_(position_offset) {}
  shape_t output_shape(std::span<const shape_t> in) const override {
    if (in[0].size() != 3 || in[0][2] % (int64_t(per_group_ + 2) * hs_) != 0)
      fail("rotary embedding expects qkv (B, T, {} x groups x {}), got {}", per_group_ + 2, hs_,
           shape_str(in[0]));
    return in[0];
  }
  void forward(std::span<const tensor* const> in, tensor& out, stash&) override {
    on(out).rope_forward(out, *in[0], rotated_heads(*in[0]), hs_, theta_, offset_);
  }
  void backward(std::span<const tensor* const>, const tensor& dout, std::span<tensor* const> din,
                stash&) override {
    on(dout).rope_backward(*din[0], dout, rotated_heads(dout), hs_, theta_, offset_);
  }

 private:
  int rotated_heads(const tensor& qkv) const {
    const int groups = int(qkv.dim(2) / (int64_t(per_group_ + 2) * hs_));
    return (per_group_ + 1) * groups;
  }

  int hs_;
  int per_group_;
  float theta_;
  int offset_;
};

class swiglu_layer final : public layer {
 public:
  shape_t output_shape(std::span<const shape_t> in) const override {
    if (in[0].size() != 3 || in[0][2] % 2 != 0)
      fail("swiglu expects [gate | up] (B, T, 2 x F), got {}", shape_str(in[0]));
    return with_features(in[0], {in[0][2] / 2});
  }
  void forward(std::span<const tensor* const> in, tensor& out, stash&) override {
    on(out).swiglu_forward(out, *in[0]);
  }
  void backward(std::span<const tensor* const> in, const tensor& dout, std::span<tensor* const> din,
                stash&) override {
    on(dout).swiglu_backward(*din[0], *in[0], dout);
  }
};

}  // namespace

int rmsnorm(graph& g, const std::string& name, int x, int C, float eps) {
  if (!(eps > 0)) fail("rmsnorm '{}': epsilon must be positive (got {})", name, eps);
  node_info n;
  n.name = name;
  n.kind = "rmsnorm";
  n.inputs = {x};
  n.params = {{name + ".weight", {C}, init_kind::ones, 0, false}};
  n.flops_per_token = 4.0 * C;
  n.activation_bytes_per_token = C * act(g) + kF32;
  n.make = [eps](std::span<const parameter_ptr> p) {
    return std::make_unique<rmsnorm_layer>(p[0], eps);
  };
  return g.add_node(std::move(n), {C}, g.activation_type());
}

int rotary(graph& g, const std::string& name, int qkv, int NH, int groups, int head_size,
           float theta, int position_offset) {
  if (head_size < 2 || head_size % 2 != 0)
    fail("rotary embedding '{}': head size {} must be even", name, head_size);
  if (NH < 1 || groups < 1 || NH % groups != 0)
    fail("rotary embedding '{}': query groups ({}) must divide heads ({})", name, groups, NH);
  if (!(theta > 1)) fail("rotary embedding '{}': base must exceed 1 (got {})", name, theta);
  if (position_offset < 0)
    fail("rotary embedding '{}': negative position offset {}", name, position_offset);
  const int W = (NH + 2 * groups) * head_size;
  node_info n;
  n.name = name;
  n.kind = "rope";
  n.inputs = {qkv};
  n.flops_per_token = 3.0 * (NH + groups) * head_size;
  n.activation_bytes_per_token = W * act(g);
  n.tp = tp_split::heads;
  n.heads = NH;
  n.kv_heads = groups;
  n.regroup = [head_size, theta, position_offset](int per_group) -> layer_factory {
    return [head_size, per_group, theta, position_offset](std::span<const parameter_ptr>) {
      return std::make_unique<rotary_layer>(head_size, per_group, theta, position_offset);
    };
  };
  n.make = n.regroup(NH / groups);
  return g.add_node(std::move(n), {W}, g.activation_type());
}

int swiglu(graph& g, const std::string& name, int x, int F) {
  node_info n;
  n.name = name;
  n.kind = "swiglu";
  n.inputs = {x};
  n.flops_per_token = 8.0 * F;
  n.activation_bytes_per_token = F * act(g);
  n.make = [](std::span<const parameter_ptr>) { return std::make_unique<swiglu_layer>(); };
  return g.add_node(std::move(n), {F}, g.activation_type());
}

}  // namespace merak::model::layers
