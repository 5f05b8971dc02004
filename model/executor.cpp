#include "model/executor.hpp"

#include <algorithm>
#include <chrono>
#include <set>

#include "core/error.hpp"

namespace merak::model {
namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

executor::executor(const graph& g, parameter_store& store, int first, int last)
    : graph_(g), first_(first), last_(last < 0 ? int(g.nodes().size()) : last) {
  auto& nodes = g.nodes();
  if (first_ < 0 || first_ >= last_ || last_ > int(nodes.size()))
    fail("node range [{}, {}) is not inside the graph's {} nodes", first_, last_, nodes.size());
  used_inside_.assign(g.values().size(), false);
  for (int n = first_; n < last_; ++n) {
    std::vector<parameter_ptr> params;
    for (auto& spec : nodes[n].params) params.push_back(store.get_or_create(spec));
    layers_.push_back(nodes[n].make(params));
    for (int v : nodes[n].inputs) used_inside_[v] = true;
  }
  auto b = g.boundary(first_, last_);
  inputs_ = std::move(b.inputs);
  outputs_ = std::move(b.outputs);
  int loss_producer = g.loss() >= 0 ? g.values()[g.loss()].producer : -1;
  computes_loss_ = loss_producer >= first_ && loss_producer < last_;
  if (outputs_.empty() && !computes_loss_)
    fail("node range [{}, {}) produces nothing used later and no loss", first_, last_);
}

executor::micro_batch& executor::state(int mb) {
  auto it = batches_.find(mb);
  if (it == batches_.end()) fail("micro-batch {} is not in flight on this executor", mb);
  return it->second;
}

void executor::set_checkpoint(int nodes) {
  if (nodes < 0 || nodes > last_ - first_)
    fail("checkpoint of {} nodes outside a range of {}", nodes, last_ - first_);
  checkpoint_ = nodes;
}

void executor::run_forward(micro_batch& s, int from, int to, std::vector<tensor>* emit) {
  auto& nodes = graph_.nodes();
  std::vector<const tensor*> in;
  std::vector<shape_t> in_shapes;
  for (int n = from; n < to; ++n) {
    in.clear();
    in_shapes.clear();
    for (int v : nodes[n].inputs) {
      in.push_back(&s.values[v]);
      in_shapes.push_back(s.values[v].shape());
    }
    auto& out_info = graph_.values()[nodes[n].output];
    auto& st = s.stashes[n - first_];
    st.clear();
    tensor out = pool_.acquire(layers_[n - first_]->output_shape(in_shapes), out_info.type, false);
    double t0 = profiling_ ? now_s() : 0;
    layers_[n - first_]->forward(in, out, st);
    if (profiling_) profile_[nodes[n].kind].forward_s += now_s() - t0;
    pool_.release(std::move(s.values[nodes[n].output]));  // a kept copy, when recomputing
    s.values[nodes[n].output] = std::move(out);
  }
  if (emit) {
    for (int v : outputs_) {
      // A value also read inside this range stays here: send a copy.
      emit->push_back(used_inside_[v] ? s.values[v].clone() : std::move(s.values[v]));
    }
  }
}

executor::forward_result executor::forward(int mb, std::vector<tensor> inputs, bool keep_stash) {
  if (batches_.count(mb)) fail("micro-batch {} is already in flight", mb);
  if (inputs.size() != inputs_.size())
    fail("this stage takes {} inputs, got {}", inputs_.size(), inputs.size());
  micro_batch s;
  s.values.resize(graph_.values().size());
  s.stashes.resize(layers_.size());
  for (auto& st : s.stashes) st.pool = &pool_;
  for (size_t i = 0; i < inputs_.size(); ++i) {
    auto& info = graph_.values()[inputs_[i]];
    if (inputs[i].type() != info.type)
      fail("input '{}' has element type {}, expected {}", info.name, dtype_name(inputs[i].type()),
           dtype_name(info.type));
    s.values[inputs_[i]] = std::move(inputs[i]);
  }
  forward_result r;
  auto& stored = batches_.emplace(mb, std::move(s)).first->second;
  try {
    run_forward(stored, first_, last_, &r.outputs);
  } catch (...) {
    release(stored);
    batches_.erase(mb);
    throw;
  }
  if (computes_loss_) {
    const tensor& losses = stored.values[graph_.loss()];
    double sum = 0;
    for (float l : losses.span_f32()) sum += l;
    r.loss = sum / double(losses.numel());
  }
  int until = keep_stash ? first_ + checkpoint_ : last_;
  if (until > first_) drop_activations(stored, until);
  return r;
}

void executor::drop_activations(micro_batch& s, int until) {
  auto& nodes = graph_.nodes();
  std::vector<bool> keep(s.values.size(), false);
  for (int v : inputs_) keep[v] = true;
  for (int n = until; n < last_; ++n) {
    keep[nodes[n].output] = true;
    for (int v : nodes[n].inputs) keep[v] = true;  // read later: the segment's boundary
  }
  for (int n = first_; n < until; ++n) {
    int v = nodes[n].output;
    if (!keep[v]) pool_.release(std::move(s.values[v]));
    s.stashes[n - first_].clear();
  }
  s.dropped_until = until;
}

void executor::recompute(int mb) {
  auto& s = state(mb);
  if (s.stashed()) return;
  // Boundary outputs were sent already; computing them again is the price.
  run_forward(s, first_, s.dropped_until, nullptr);
  s.dropped_until = 0;
}

bool executor::has_stash(int mb) const {
  auto it = batches_.find(mb);
  return it != batches_.end() && it->second.stashed();
}

std::vector<tensor> executor::backward(int mb, std::vector<tensor> output_grads, float loss_scale) {
  auto& s = state(mb);
  if (output_grads.size() != outputs_.size())
    fail("backward of micro-batch {} got {} output gradients, expected {}", mb, output_grads.size(),
         outputs_.size());
  recompute(mb);
  auto& nodes = graph_.nodes();
  auto& vinfo = graph_.values();
  std::vector<tensor> grads(s.values.size());
  for (size_t i = 0; i < outputs_.size(); ++i) grads[outputs_[i]] = std::move(output_grads[i]);
  if (computes_loss_) {
    const tensor& losses = s.values[graph_.loss()];
    tensor d = pool_.acquire(losses.shape(), dtype::f32, false);
    float g = loss_scale / float(losses.numel());
    for (auto& x : d.span_f32()) x = g;
    grads[graph_.loss()] = std::move(d);
  }
  std::vector<bool> is_input(s.values.size(), false);
  for (int v : inputs_) is_input[v] = true;
  std::vector<const tensor*> in;
  std::vector<tensor*> din;
  for (int n = last_ - 1; n >= first_; --n) {
    int out = nodes[n].output;
    if (!grads[out].defined()) continue;  // does not reach the loss or an output
    in.clear();
    din.clear();
    for (int v : nodes[n].inputs) {
      in.push_back(&s.values[v]);
      bool needs = vinfo[v].type == dtype::f32 && (vinfo[v].producer >= 0 || is_input[v]);
      if (needs && !grads[v].defined())
        grads[v] = pool_.acquire(s.values[v].shape(), dtype::f32, true);
      din.push_back(needs ? &grads[v] : nullptr);
    }
    double t0 = profiling_ ? now_s() : 0;
    layers_[n - first_]->backward(in, grads[out], din, s.stashes[n - first_]);
    if (profiling_) profile_[nodes[n].kind].backward_s += now_s() - t0;
    // Every consumer of `out` in this range ran its backward already
    // (reverse topological order): its value, gradient and stash are done.
    pool_.release(std::move(grads[out]));
    pool_.release(std::move(s.values[out]));
    s.stashes[n - first_].clear();
  }
  std::vector<tensor> input_grads;
  for (int v : inputs_) input_grads.push_back(std::move(grads[v]));
  release(s);
  batches_.erase(mb);
  return input_grads;
}

double executor::evaluate(std::vector<tensor> inputs) {
  if (!computes_loss_ || !outputs_.empty())
    fail("evaluate() needs a range that ends with the loss");
  constexpr int kEvalId = -1;
  double loss = forward(kEvalId, std::move(inputs), false).loss;
  release(state(kEvalId));
  batches_.erase(kEvalId);
  return loss;
}

void executor::release(micro_batch& s) {
  std::vector<bool> is_input(s.values.size(), false);
  for (int v : inputs_) is_input[v] = true;
  for (size_t v = 0; v < s.values.size(); ++v) {
    if (is_input[v] && graph_.values()[v].producer < 0)
      s.values[v] = tensor();  // graph inputs came from outside the pool
    else
      pool_.release(std::move(s.values[v]));
  }
  for (auto& st : s.stashes) st.clear();
}

int64_t executor::activation_bytes() const {
  int64_t b = 0;
  for (auto& [mb, s] : batches_) {
    for (auto& v : s.values) b += int64_t(v.bytes());
    for (auto& st : s.stashes) b += st.bytes();
  }
  return b;
}

}  // namespace merak::model
