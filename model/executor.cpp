#include "model/executor.hpp"

#include <chrono>

#include "core/error.hpp"

namespace merak::model {
namespace {
double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

executor::executor(const graph& g, parameter_store& store) : graph_(g) {
  if (g.loss() < 0) fail("the model graph has no loss value");
  layers_.reserve(g.nodes().size());
  for (auto& node : g.nodes()) {
    std::vector<parameter_ptr> params;
    for (auto& spec : node.params) params.push_back(store.get_or_create(spec));
    layers_.push_back(node.make(params));
  }
  values_.resize(g.values().size());
  stashes_.resize(g.nodes().size());
  for (auto& s : stashes_) s.pool = &pool_;
}

double executor::forward(std::vector<tensor> inputs) {
  auto& gin = graph_.inputs();
  if (inputs.size() != gin.size())
    fail("the model takes {} inputs, got {}", gin.size(), inputs.size());
  release_all();
  for (size_t i = 0; i < gin.size(); ++i) {
    auto& info = graph_.values()[gin[i]];
    if (inputs[i].type() != info.type) fail("input '{}' has the wrong element type", info.name);
    values_[gin[i]] = std::move(inputs[i]);
  }
  auto& nodes = graph_.nodes();
  std::vector<const tensor*> in;
  std::vector<shape_t> in_shapes;
  for (size_t n = 0; n < nodes.size(); ++n) {
    in.clear();
    in_shapes.clear();
    for (int v : nodes[n].inputs) {
      in.push_back(&values_[v]);
      in_shapes.push_back(values_[v].shape());
    }
    auto& out_info = graph_.values()[nodes[n].output];
    tensor out = pool_.acquire(layers_[n]->output_shape(in_shapes), out_info.type, false);
    double t0 = profiling_ ? now_s() : 0;
    layers_[n]->forward(in, out, stashes_[n]);
    if (profiling_) profile_[nodes[n].kind].forward_s += now_s() - t0;
    values_[nodes[n].output] = std::move(out);
  }
  has_forward_ = true;
  const tensor& losses = values_[graph_.loss()];
  double sum = 0;
  for (float l : losses.span_f32()) sum += l;
  return sum / double(losses.numel());
}

void executor::backward(float scale) {
  MERAK_CHECK(has_forward_, "backward without a forward");
  auto& nodes = graph_.nodes();
  auto& vinfo = graph_.values();
  std::vector<tensor> grads(values_.size());
  {
    const tensor& losses = values_[graph_.loss()];
    tensor d = pool_.acquire(losses.shape(), dtype::f32, false);
    float g = scale / float(losses.numel());
    for (auto& x : d.span_f32()) x = g;
    grads[graph_.loss()] = std::move(d);
  }
  std::vector<const tensor*> in;
  std::vector<tensor*> din;
  for (size_t n = nodes.size(); n-- > 0;) {
    int out = nodes[n].output;
    if (!grads[out].defined()) continue;  // output does not reach the loss
    in.clear();
    din.clear();
    for (int v : nodes[n].inputs) {
      in.push_back(&values_[v]);
      bool needs = vinfo[v].type == dtype::f32 && vinfo[v].producer >= 0;
      if (needs && !grads[v].defined()) grads[v] = pool_.acquire(values_[v].shape(), dtype::f32, true);
      din.push_back(needs ? &grads[v] : nullptr);
    }
    double t0 = profiling_ ? now_s() : 0;
    layers_[n]->backward(in, values_[out], grads[out], din, stashes_[n]);
    if (profiling_) profile_[nodes[n].kind].backward_s += now_s() - t0;
    // Every consumer of `out` ran its backward already (reverse topological
    // order), so the output, its gradient and the stash are done with.
    pool_.release(std::move(grads[out]));
    pool_.release(std::move(values_[out]));
    stashes_[n].clear();
  }
  release_all();
}

double executor::evaluate(std::vector<tensor> inputs) {
  double loss = forward(std::move(inputs));
  release_all();
  return loss;
}

void executor::release_all() {
  auto& gin = graph_.inputs();
  for (size_t v = 0; v < values_.size(); ++v) {
    bool is_input = std::find(gin.begin(), gin.end(), int(v)) != gin.end();
    if (is_input)
      values_[v] = tensor();
    else
      pool_.release(std::move(values_[v]));
  }
  for (auto& s : stashes_) s.clear();
  has_forward_ = false;
}

int64_t executor::activation_bytes() const {
  int64_t b = pool_.cached_bytes();
  for (auto& v : values_) b += int64_t(v.bytes());
  for (auto& s : stashes_) b += s.bytes();
  return b;
}

}  // namespace merak::model
