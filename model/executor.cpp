#include "model/executor.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <set>
#include <utility>

#include <fmt/format.h>

#include "core/error.hpp"
#include "model/backend.hpp"
#include "model/grad_buckets.hpp"

namespace merak::model {
namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

executor::executor(const graph& g, parameter_store& store, int first, int last)
    : graph_(g),
      first_(first),
      last_(last < 0 ? int(g.nodes().size()) : last),
      where_(store.where()),
      pool_(store.where()) {
  auto& nodes = g.nodes();
  if (first_ < 0 || first_ >= last_ || last_ > int(nodes.size()))
    fail("node range [{}, {}) is not inside the graph's {} nodes", first_, last_, nodes.size());
  used_inside_.assign(g.values().size(), false);
  for (int n = first_; n < last_; ++n) {
    std::vector<parameter_ptr> params;
    for (auto& spec : nodes[n].params) params.push_back(store.get_or_create(spec));
    if (nodes[n].sequence_parallel && !params.empty()) {
      sp_nodes_.push_back(n);
      for (auto& p : params)
        if (std::find(sp_params_.begin(), sp_params_.end(), p) == sp_params_.end())
          sp_params_.push_back(p);
    }
    layers_.push_back(nodes[n].make(params));
    node_params_.push_back(params);
    for (int v : nodes[n].inputs) used_inside_[v] = true;
  }
  regather_ = regathered_inputs(g, first_, last_);
  auto b = g.boundary(first_, last_);
  inputs_ = std::move(b.inputs);
  outputs_ = std::move(b.outputs);
  for (int n = first_; n < last_; ++n) {
    if (nodes[n].comm != tp_comm::sp_reduce) continue;
    const int v = nodes[n].inputs[0];
    const int producer = g.values()[v].producer;
    int readers = 0;
    for (auto& node : nodes)
      for (int x : node.inputs) readers += x == v;
    if (producer >= first_ && producer < n && readers == 1) reduce_frees_input_.insert(n);
  }
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

void executor::set_segments(std::vector<int> starts) {
  segment_starts_.clear();
  for (size_t i = 0; i < starts.size(); ++i) {
    if (starts[i] < 0 || starts[i] >= last_ - first_ || (i == 0) != (starts[i] == 0) ||
        (i > 0 && starts[i] <= starts[i - 1]))
      fail("segment starts [{}] are not ascending inside a range of {} nodes from 0",
           fmt::join(starts, ", "), last_ - first_);
    segment_starts_.push_back(first_ + starts[i]);
  }
}

int executor::set_selective_recompute(bool on) {
  int n = 0;
  for (auto& l : layers_) n += l->set_recompute_core(on) ? 1 : 0;
  return n;
}

void executor::set_tp(tp_group* group, int overlap) {
  if (overlap < 0 || overlap > 2) fail("--tp-overlap must be 0, 1 or 2 (got {})", overlap);
  tp_ = group && group->size() > 1 ? group : nullptr;
  tp_overlap_ = overlap;
}

int executor::sub_count(int64_t batch) const {
  return tp_ && tp_overlap_ > 0 && batch >= 2 && batch % 2 == 0 ? 2 : 1;
}

namespace {

// Splits (B, ...) into k equal parts along B (k = 1: moves).
std::vector<tensor> split_rows(tensor&& t, int k, tensor_pool& pool) {
  std::vector<tensor> parts;
  if (k == 1) {
    parts.push_back(std::move(t));
    return parts;
  }
  shape_t sh = t.shape();
  sh[0] /= k;
  const size_t bytes = t.bytes() / size_t(k);
  for (int i = 0; i < k; ++i) {
    parts.push_back(pool.acquire(sh, t.type(), false));
    copy_bytes(parts.back(), 0, t, size_t(i) * bytes, bytes);
  }
  pool.release(std::move(t));
  return parts;
}

// The inverse of split_rows; `parts` are left empty.
tensor concat_rows(std::vector<tensor*> parts, tensor_pool& pool, bool move_single) {
  if (parts.size() == 1) return move_single ? std::move(*parts[0]) : parts[0]->clone();
  shape_t sh = parts[0]->shape();
  sh[0] *= int64_t(parts.size());
  tensor out = pool.acquire(sh, parts[0]->type(), false);
  size_t at = 0;
  for (auto* t : parts) {
    copy_bytes(out, at, *t, 0, t->bytes());
    at += t->bytes();
  }
  return out;
}

}  // namespace

void executor::run_node_forward(sub_batch& s, int n, const tensor* whole) {
  before_node(n, n + 1);
  auto& node = graph_.nodes()[n];
  const tensor* in[4];
  shape_t in_shapes[4];
  MERAK_CHECK(node.inputs.size() <= 4, "node '{}' has {} inputs", node.name, node.inputs.size());
  for (size_t i = 0; i < node.inputs.size(); ++i) {
    in[i] = &s.values[node.inputs[i]];
    in_shapes[i] = in[i]->shape();
  }
  const size_t k = node.inputs.size();
  auto& out_info = graph_.values()[node.output];
  auto& st = s.stashes[n - first_];
  st.clear();
  auto& l = *layers_[n - first_];
  tensor out = pool_.acquire(l.output_shape({in_shapes, k}), out_info.type, false);
  if (whole) in[0] = whole;
  if (node_hook_) node_hook_();
  double t0 = profiling_ ? now_s() : 0;
  l.forward({in, k}, out, st);
  if (profiling_) profile_[node.kind].forward_s += now_s() - t0;
  pool_.release(std::move(s.values[node.output]));  // a kept copy, when recomputing
  s.values[node.output] = std::move(out);
  after_node(n);
}

void executor::after_node(int n) {
  if (transient_parameters_) layers_[size_t(n - first_)]->drop_derived();
}

tensor executor::gather_buffer(const tensor& part) {
  shape_t sh = part.shape();
  sh[1] *= tp_->size();
  tensor whole = pool_.acquire(sh, part.type(), false);
  copy_bytes(whole, part.bytes() * size_t(tp_->rank()), part, 0, part.bytes());
  return whole;
}

void executor::run_forward(micro_batch& s, int from, int to) {
  auto& nodes = graph_.nodes();
  const int k = int(s.subs.size());
  if (!tp_) {
    for (int n = from; n < to; ++n) run_node_forward(s.subs[0], n);
    return;
  }
  // Each sub-batch runs up to and including its next all-reduce (started,
  // not awaited), then hands over to the next one; it waits for its sum
  // only when it resumes. Level 1 joins every sub-batch after each second
  // all-reduce (the end of a transformer block). Sequence parallelism's
  // collectives come before their node: it runs when its sub-batch resumes.
  std::vector<int> cursor(k, from), ticket(k, -1), pending(k, -1);
  std::vector<tensor> whole(k);
  int reduces = 0;
  auto resume = [&](int j) {
    if (ticket[j] >= 0) tp_->wait(std::exchange(ticket[j], -1));
    if (pending[j] < 0) return;
    const int n = std::exchange(pending[j], -1);
    run_node_forward(s.subs[j], n, whole[j].defined() ? &whole[j] : nullptr);
    if (whole[j].defined()) pool_.release(std::move(whole[j]));
    // The partial sums, reduce-scattered and sliced, unless a dropped
    // segment starts here: its recomputation reads them again.
    const bool recomputed_from_here =
        n < s.dropped_until &&
        std::find(segment_starts_.begin(), segment_starts_.end(), n) != segment_starts_.end();
    if (reduce_frees_input_.count(n) && !recomputed_from_here)
      pool_.release(std::move(s.subs[j].values[nodes[n].inputs[0]]));
  };
  auto wait_all = [&] {
    for (int j = 0; j < k; ++j) resume(j);
  };
  while (cursor[0] < to) {
    int round_reduces = 0;
    if (k > 1) hold_round(cursor[0], pending[0], to, true);  // the same for every sub-batch
    for (int j = 0; j < k; ++j) {
      resume(j);
      while (cursor[j] < to) {
        int n = cursor[j]++;
        const auto comm = nodes[n].comm;
        if (comm == tp_comm::sp_reduce) {  // the partial sums, reduce-scattered in place
          ticket[j] = tp_->start_reduce_scatter(s.subs[j].values[nodes[n].inputs[0]]);
          pending[j] = n;
        } else if (comm == tp_comm::sp_gather || comm == tp_comm::sp_exit) {
          whole[j] = gather_buffer(s.subs[j].values[nodes[n].inputs[0]]);
          ticket[j] = tp_->start_allgather(whole[j]);
          pending[j] = n;
        } else {
          run_node_forward(s.subs[j], n);
          if (auto g = regather_.find(n); g != regather_.end())  // gathered again in backward
            pool_.release(std::move(s.subs[j].values[nodes[g->second].output]));
          if (comm == tp_comm::reduce)
            ticket[j] = tp_->start_allreduce(s.subs[j].values[nodes[n].output]);
        }
        if (ticket[j] < 0) continue;
        if (j == 0 && (comm == tp_comm::reduce || comm == tp_comm::sp_reduce)) ++round_reduces;
        if (tp_overlap_ == 0) resume(j);
        break;
      }
    }
    reduces += round_reduces;
    if (tp_overlap_ == 1 && round_reduces > 0 && reduces % 2 == 0) wait_all();
  }
  wait_all();
  if (k > 1) parameter_span(0, 0);
}

executor::forward_result executor::forward(int mb, std::vector<tensor> inputs, bool keep_stash) {
  if (batches_.count(mb)) fail("micro-batch {} is already in flight", mb);
  if (inputs.size() != inputs_.size())
    fail("this stage takes {} inputs, got {}", inputs_.size(), inputs.size());
  for (size_t i = 0; i < inputs_.size(); ++i) {
    auto& info = graph_.values()[inputs_[i]];
    if (inputs[i].type() != info.type)
      fail("input '{}' has element type {}, expected {}", info.name, dtype_name(inputs[i].type()),
           dtype_name(info.type));
    if (inputs[i].rank() < 1 || inputs[i].dim(0) != inputs[0].dim(0))
      fail("input '{}' has shape {}, batch {} expected", info.name, shape_str(inputs[i].shape()),
           inputs[0].dim(0));
  }
  // Inputs from the host (the data) move to this executor's device.
  for (auto& in : inputs)
    if (!(in.where() == where_)) in = in.to(where_);
  if (batches_.empty())
    for (auto& l : layers_) l->parameters_changed();
  const int k = inputs.empty() ? 1 : sub_count(inputs[0].dim(0));
  micro_batch s;
  s.subs.resize(k);
  for (auto& sub : s.subs) {
    sub.values.resize(graph_.values().size());
    sub.stashes.resize(layers_.size());
    for (auto& st : sub.stashes) st.pool = &pool_;
  }
  for (size_t i = 0; i < inputs_.size(); ++i) {
    auto parts = split_rows(std::move(inputs[i]), k, pool_);
    for (int j = 0; j < k; ++j) s.subs[j].values[inputs_[i]] = std::move(parts[j]);
  }
  forward_result r;
  auto& stored = batches_.emplace(mb, std::move(s)).first->second;
  const int until = keep_stash ? first_ + checkpoint_ : last_;
  // With segments, each dropped segment goes as soon as it ran: the forward
  // never holds more than one segment's activations beyond what it keeps.
  const bool by_segment = until > first_ && !segment_starts_.empty();
  try {
    if (by_segment) {
      stored.dropped_until = until;  // run_forward keeps what a segment's recomputation reads
      std::vector<int> bounds;
      for (int c : segment_starts_)
        if (c < until) bounds.push_back(c);
      bounds.push_back(until);
      if (until < last_) bounds.push_back(last_);
      for (size_t i = 0; i + 1 < bounds.size(); ++i) {
        run_forward(stored, bounds[i], bounds[i + 1]);
        note_activations();
        if (bounds[i + 1] <= until) drop_range(stored, bounds[i], bounds[i + 1]);
      }
    } else {
      run_forward(stored, first_, last_);
    }
  } catch (...) {
    release(stored);
    batches_.erase(mb);
    throw;
  }
  // The forward's end, before the outputs are handed on.
  if (!by_segment) note_activations();
  for (int v : outputs_) {
    std::vector<tensor*> parts;
    for (auto& sub : stored.subs) parts.push_back(&sub.values[v]);
    // A value also read inside this range stays here: send a copy.
    r.outputs.push_back(concat_rows(parts, pool_, !used_inside_[v]));
    if (parts.size() > 1 && !used_inside_[v])
      for (auto* p : parts) pool_.release(std::move(*p));
  }
  if (computes_loss_) {
    double sum = 0;
    int64_t count = 0;
    for (auto& sub : stored.subs) {
      const tensor& on_device = sub.values[graph_.loss()];
      const tensor host =
          on_device.where().type == device::kind::cpu ? tensor() : on_device.to(device::cpu());
      const tensor& losses = host.defined() ? host : on_device;
      for (float l : losses.span_f32()) sum += l;
      count += losses.numel();
    }
    r.loss = sum / double(count);
  }
  if (!by_segment && until > first_) drop_activations(stored, until);
  return r;
}

void executor::drop_activations(micro_batch& s, int until) {
  auto& nodes = graph_.nodes();
  std::vector<bool> keep(graph_.values().size(), false);
  for (int v : inputs_) keep[v] = true;
  for (int n = until; n < last_; ++n) {
    keep[nodes[n].output] = true;
    for (int v : nodes[n].inputs) keep[v] = true;  // read later: the segment's boundary
  }
  if (computes_loss_) keep[graph_.loss()] = true;  // its size scales the loss gradient
  for (auto& sub : s.subs)
    for (int n = first_; n < until; ++n) {
      int v = nodes[n].output;
      if (!keep[v]) pool_.release(std::move(sub.values[v]));
      sub.stashes[n - first_].clear();
    }
  s.dropped_until = until;
}

void executor::drop_range(micro_batch& s, int lo, int hi) {
  auto& nodes = graph_.nodes();
  std::vector<bool> keep(graph_.values().size(), false);
  for (int v : inputs_) keep[v] = true;
  for (int v : outputs_) keep[v] = true;  // sent on after the forward
  if (computes_loss_) keep[graph_.loss()] = true;
  for (int n = hi; n < last_; ++n)
    for (int v : nodes[n].inputs) keep[v] = true;  // a later segment's input
  for (auto& sub : s.subs)
    for (int n = lo; n < hi; ++n) {
      int v = nodes[n].output;
      if (!keep[v]) pool_.release(std::move(sub.values[v]));
      sub.stashes[n - first_].clear();
    }
}

void executor::recompute(int mb) {
  auto& s = state(mb);
  if (s.stashed()) return;
  // Boundary outputs were sent already; computing them again is the price.
  run_forward(s, first_, s.dropped_until);
  s.dropped_until = 0;
  note_activations();
}

bool executor::has_stash(int mb) const {
  auto it = batches_.find(mb);
  return it != batches_.end() && it->second.stashed();
}

bool executor::run_node_backward(sub_batch& sub, std::vector<tensor>& g, int n,
                                 const std::vector<char>* keep) {
  auto& nodes = graph_.nodes();
  auto& vinfo = graph_.values();
  const int out = nodes[n].output;
  regather_input(sub, n);
  bwd_in_.clear();
  bwd_din_.clear();
  for (int v : nodes[n].inputs) {
    bwd_in_.push_back(&sub.values[v]);
    const bool is_input = std::find(inputs_.begin(), inputs_.end(), v) != inputs_.end();
    const bool needs = is_floating(vinfo[v].type) && (vinfo[v].producer >= 0 || is_input);
    if (needs && !g[v].defined()) {
      // A freed input of sp_reduce is as whole as the gathered gradient.
      const bool freed = !sub.values[v].defined() && reduce_frees_input_.count(n) > 0;
      g[v] = pool_.acquire(freed ? g[out].shape() : sub.values[v].shape(), vinfo[v].type, true);
    }
    bwd_din_.push_back(needs ? &g[v] : nullptr);
  }
  before_node(n, n - 1);
  if (node_hook_) node_hook_();
  materialize_gradients(n);
  double t0 = profiling_ ? now_s() : 0;
  auto& l = *layers_[n - first_];
  const bool defer = keep && l.splits_weight_grad();
  if (defer)
    l.backward_input(bwd_in_, g[out], bwd_din_, sub.stashes[n - first_]);
  else
    l.backward(bwd_in_, g[out], bwd_din_, sub.stashes[n - first_]);
  if (profiling_) profile_[nodes[n].kind].backward_s += now_s() - t0;
  after_node(n);
  // Every consumer of `out` in this range ran its backward already
  // (reverse topological order): its value, gradient and stash are done,
  // but for what a deferred weight gradient reads.
  if (defer)
    sub.weight_douts[n] = std::move(g[out]);
  else
    pool_.release(std::move(g[out]));
  if (!keep || !(*keep)[out]) pool_.release(std::move(sub.values[out]));
  sub.stashes[n - first_].clear();
  return !defer;
}

void executor::hold_round(int cursor, int pending, int limit, bool forward) {
  auto starts_collective = [&](int n) {
    const auto comm = tp_ ? graph_.nodes()[size_t(n)].comm : tp_comm::none;
    return forward ? comm == tp_comm::reduce || comm == tp_comm::sp_reduce ||
                         comm == tp_comm::sp_gather || comm == tp_comm::sp_exit
                   : comm == tp_comm::copy || comm == tp_comm::sp_gather ||
                         comm == tp_comm::sp_reduce || comm == tp_comm::sp_enter;
  };
  const int from = pending >= 0 ? pending : cursor;
  int end = cursor;
  if (forward) {
    while (end + 1 < limit && !starts_collective(end)) ++end;
    parameter_span(from, end + 1);
  } else {
    while (end > limit && !starts_collective(end)) --end;
    parameter_span(end, from + 1);
  }
}

void executor::run_backward(micro_batch& s, std::vector<std::vector<tensor>>& grads,
                            const std::vector<char>* keep,
                            const std::function<void(int)>& node_done, sp_partials& sp, int lo,
                            int hi) {
  auto& nodes = graph_.nodes();
  const int k = int(s.subs.size());
  std::vector<int> subs_done(last_ - first_, 0);
  // Sequence parallelism: those nodes are reported finished only once their
  // partial gradients are summed (end_sp_partials).
  auto finished = [&](int n) {
    if (++subs_done[n - first_] != k) return;
    if (sp.is_sp[size_t(n - first_)])
      sp.finished.push_back(n);
    else if (node_done)
      node_done(n);
  };
  auto run_node = [&](int j, int n) {
    if (run_node_backward(s.subs[j], grads[j], n, keep)) finished(n);
  };
  // Mirror of run_forward: the last sub-batch first; a sub-batch starts the
  // all-reduce of a tp_copy node's output gradient, hands over, and runs
  // that node (adding the sum into its input's gradient) when it resumes.
  // Sequence parallelism: sp_gather reduce-scatters its output gradient in
  // place; sp_reduce and sp_enter all-gather theirs into a whole buffer that
  // replaces it; either node runs when its sub-batch resumes.
  std::vector<int> cursor(k, hi - 1), pending(k, -1), ticket(k, -1);
  std::vector<tensor> whole(k);
  int reduces = 0;
  auto resume = [&](int j) {
    if (ticket[j] >= 0) tp_->wait(std::exchange(ticket[j], -1));
    if (pending[j] < 0) return;
    const int n = std::exchange(pending[j], -1);
    if (whole[j].defined()) {
      pool_.release(std::move(grads[j][nodes[n].output]));
      grads[j][nodes[n].output] = std::move(whole[j]);
    }
    run_node(j, n);
  };
  while (true) {
    bool active = false;
    int round_reduces = 0;
    if (k > 1 && cursor[k - 1] >= lo) hold_round(cursor[k - 1], pending[k - 1], lo, false);
    for (int jj = k - 1; jj >= 0; --jj) {
      const int j = jj;
      resume(j);
      while (cursor[j] >= lo) {
        int n = cursor[j]--;
        active = true;
        if (!grads[j][nodes[n].output].defined()) {  // does not reach the loss
          finished(n);
          continue;
        }
        const auto comm = tp_ ? nodes[n].comm : tp_comm::none;
        auto& dout = grads[j][nodes[n].output];
        if (comm == tp_comm::copy) {
          ticket[j] = tp_->start_allreduce(dout);
        } else if (comm == tp_comm::sp_gather) {
          ticket[j] = tp_->start_reduce_scatter(dout);
        } else if (comm == tp_comm::sp_reduce || comm == tp_comm::sp_enter) {
          whole[j] = gather_buffer(dout);
          ticket[j] = tp_->start_allgather(whole[j]);
        } else {
          run_node(j, n);
          continue;
        }
        pending[j] = n;
        if (jj == k - 1 && (comm == tp_comm::copy || comm == tp_comm::sp_gather)) ++round_reduces;
        if (tp_overlap_ == 0) resume(j);
        break;
      }
    }
    reduces += round_reduces;
    if (tp_overlap_ == 1 && round_reduces > 0 && reduces % 2 == 0)
      for (int j = 0; j < k; ++j) resume(j);
    if (!active) break;
  }
  for (int j = 0; j < k; ++j) resume(j);
  if (k > 1) parameter_span(0, 0);
}

executor::sp_partials executor::begin_sp_partials(int lo, int hi) {
  sp_partials sp;
  sp.is_sp.assign(size_t(last_ - first_), 0);
  if (!tp_) return sp;
  for (int n : sp_nodes_) {
    if (n < lo || n >= hi) continue;
    sp.is_sp[size_t(n - first_)] = 1;
    for (auto& spec : graph_.nodes()[size_t(n)].params)
      for (auto& p : sp_params_)
        if (p->spec.name == spec.name &&
            std::find(sp.params.begin(), sp.params.end(), p) == sp.params.end())
          sp.params.push_back(p);
  }
  for (auto& p : sp.params) {
    if (!p->grad.defined()) p->grad = tensor::zeros(p->spec.shape, dtype::f32, where_);
    sp.partial.push_back(pool_.acquire(p->grad.shape(), p->grad.type(), true));
    std::swap(p->grad, sp.partial.back());
  }
  return sp;
}

void executor::end_sp_partials(sp_partials& sp, const std::function<void(int)>& node_done) {
  auto report = [&] {
    if (node_done)
      for (int n : sp.finished) node_done(n);
  };
  if (sp.params.empty()) return report();
  std::vector<int> sums;
  for (auto& p : sp.params) sums.push_back(tp_->start_allreduce(p->grad));
  for (int t : sums) tp_->wait(t);
  for (size_t i = 0; i < sp.params.size(); ++i) {
    auto& p = *sp.params[i];
    std::swap(p.grad, sp.partial[i]);  // the gradient so far back; partial[i] the sum
    backend_for(p.grad.where()).accumulate(p.grad, sp.partial[i]);
    pool_.release(std::move(sp.partial[i]));
  }
  report();
}

void executor::materialize_gradients(int n) {
  for (auto& p : node_params_[size_t(n - first_)])
    if (!p->grad.defined()) p->grad = tensor::zeros(p->spec.shape, dtype::f32, where_);
}

tensor* executor::regather_input(sub_batch& sub, int n) {
  auto r = regather_.find(n);
  if (r == regather_.end() || !tp_) return nullptr;
  auto& whole = sub.values[graph_.nodes()[size_t(r->second)].output];
  if (whole.defined()) return nullptr;
  whole = gather_buffer(sub.values[graph_.nodes()[size_t(r->second)].inputs[0]]);
  tp_->wait(tp_->start_allgather(whole));
  return &whole;
}

std::vector<tensor> executor::backward(int mb, std::vector<tensor> output_grads, float loss_scale,
                                       const std::function<void(int)>& node_done,
                                       bool split_weights) {
  auto& s = state(mb);
  if (s.awaiting_weights) fail("backward of micro-batch {} ran already", mb);
  if (output_grads.size() != outputs_.size())
    fail("backward of micro-batch {} got {} output gradients, expected {}", mb, output_grads.size(),
         outputs_.size());
  // Dropped activations come back one segment at a time when the segments
  // are known, else all at once now.
  const bool by_segment = !s.stashed() && !segment_starts_.empty();
  if (!by_segment) recompute(mb);
  for (auto& g : output_grads)  // from the host (another process) to this device
    if (g.defined() && !(g.where() == where_)) g = g.to(where_);
  const int k = int(s.subs.size());
  std::vector<std::vector<tensor>> grads(k);
  for (auto& g : grads) g.resize(graph_.values().size());
  for (size_t i = 0; i < outputs_.size(); ++i) {
    auto parts = split_rows(std::move(output_grads[i]), k, pool_);
    for (int j = 0; j < k; ++j) grads[j][outputs_[i]] = std::move(parts[j]);
  }
  if (computes_loss_) {
    int64_t count = 0;
    for (auto& sub : s.subs) count += sub.values[graph_.loss()].numel();
    // d(mean over the whole micro-batch) for every sub-batch's tokens.
    float g = loss_scale / float(count);
    for (int j = 0; j < k; ++j) {
      const tensor& losses = s.subs[j].values[graph_.loss()];
      tensor d = pool_.acquire(losses.shape(), dtype::f32, false);
      if (where_.type == device::kind::cpu) {
        for (auto& x : d.span_f32()) x = g;
      } else {
        tensor h(losses.shape());
        for (auto& x : h.span_f32()) x = g;
        copy_bytes(d, 0, h, 0, h.bytes());
      }
      grads[j][graph_.loss()] = std::move(d);
    }
  }
  std::vector<char> keep;
  if (split_weights) {
    keep.assign(graph_.values().size(), 0);
    for (int n = first_; n < last_; ++n) {
      if (!layers_[n - first_]->splits_weight_grad()) continue;
      for (int v : graph_.nodes()[n].inputs) keep[v] = 1;
      // A sequence-parallel gathered input waits as this shard's slice and
      // is gathered again for the weight gradient (weight_backward).
      if (auto r = regather_.find(n); r != regather_.end() && tp_) {
        const auto& gather = graph_.nodes()[size_t(r->second)];
        keep[gather.output] = 0;
        keep[gather.inputs[0]] = 1;
      }
    }
  }
  sp_partials sp = begin_sp_partials(first_, last_);
  if (by_segment) {
    std::vector<int> bounds;  // the dropped segments, then the rest of the range
    for (int c : segment_starts_)
      if (c < s.dropped_until) bounds.push_back(c);
    bounds.push_back(s.dropped_until);
    if (bounds.back() < last_) bounds.push_back(last_);
    for (size_t i = bounds.size() - 1; i-- > 0;) {
      if (bounds[i] < s.dropped_until) {
        run_forward(s, bounds[i], bounds[i + 1]);
        note_activations();
      }
      run_backward(s, grads, split_weights ? &keep : nullptr, node_done, sp, bounds[i],
                   bounds[i + 1]);
    }
    s.dropped_until = 0;
  } else {
    run_backward(s, grads, split_weights ? &keep : nullptr, node_done, sp, first_, last_);
  }
  end_sp_partials(sp, node_done);
  std::vector<tensor> input_grads;
  for (int v : inputs_) {
    if (!grads[0][v].defined()) {
      input_grads.emplace_back();
      continue;
    }
    std::vector<tensor*> parts;
    for (auto& g : grads) parts.push_back(&g[v]);
    input_grads.push_back(concat_rows(parts, pool_, true));
    if (k > 1)
      for (auto* p : parts) pool_.release(std::move(*p));
  }
  if (split_weights) {
    // Only what the weight gradients read stays (kept values were never
    // released; the gradients of this range's values are done).
    for (auto& g : grads)
      for (auto& t : g)
        if (t.defined()) pool_.release(std::move(t));
    s.awaiting_weights = true;
    return input_grads;
  }
  release(s);
  batches_.erase(mb);
  return input_grads;
}

std::vector<int> executor::backward_finish_order(bool split_weights) const {
  std::vector<char> deferred(size_t(last_ - first_), 0);
  if (split_weights)
    for (int n = first_; n < last_; ++n)
      deferred[size_t(n - first_)] = layers_[size_t(n - first_)]->splits_weight_grad();
  return model::backward_finish_order(last_ - first_, late_gradient_nodes(), deferred);
}

std::vector<char> executor::late_gradient_nodes() const {
  return model::late_gradient_nodes(graph_, first_, last_, tp_ != nullptr);
}

void executor::weight_backward(int mb, const std::function<void(int)>& node_done) {
  auto& s = state(mb);
  if (!s.awaiting_weights) fail("micro-batch {} has no split backward to finish", mb);
  auto& nodes = graph_.nodes();
  std::vector<const tensor*> in;
  for (int n = last_ - 1; n >= first_; --n) {
    bool ran = false;
    for (auto& sub : s.subs) {
      auto it = sub.weight_douts.find(n);
      if (it == sub.weight_douts.end()) continue;
      tensor* gathered = regather_input(sub, n);  // for this node only
      in.clear();
      for (int v : nodes[n].inputs) in.push_back(&sub.values[v]);
      before_node(n, n - 1);
      if (node_hook_) node_hook_();
      materialize_gradients(n);
      double t0 = profiling_ ? now_s() : 0;
      layers_[n - first_]->backward_weight(in, it->second);
      if (profiling_) profile_[nodes[n].kind].backward_s += now_s() - t0;
      after_node(n);
      if (gathered) pool_.release(std::move(*gathered));
      pool_.release(std::move(it->second));
      sub.weight_douts.erase(it);
      ran = true;
    }
    if (ran && node_done) node_done(n);
  }
  release(s);
  batches_.erase(mb);
}

double executor::evaluate(std::vector<tensor> inputs) {
  if (!computes_loss_ || !outputs_.empty())
    fail("evaluate() needs a range that ends with the loss");
  return infer(std::move(inputs)).loss;
}

executor::forward_result executor::infer(std::vector<tensor> inputs) {
  constexpr int kEvalId = -1;
  auto r = forward(kEvalId, std::move(inputs), false);
  release(state(kEvalId));
  batches_.erase(kEvalId);
  return r;
}

void executor::release(micro_batch& s) {
  std::vector<bool> is_input(graph_.values().size(), false);
  for (int v : inputs_) is_input[v] = true;
  for (auto& sub : s.subs) {
    for (size_t v = 0; v < sub.values.size(); ++v) {
      if (is_input[v] && graph_.values()[v].producer < 0 && s.subs.size() == 1)
        sub.values[v] = tensor();  // graph inputs came from outside the pool
      else
        pool_.release(std::move(sub.values[v]));
    }
    for (auto& st : sub.stashes) st.clear();
  }
}

int64_t executor::activation_bytes() const {
  int64_t b = 0;
  for (auto& [mb, s] : batches_)
    for (auto& sub : s.subs) {
      for (auto& v : sub.values) b += int64_t(v.bytes());
      for (auto& st : sub.stashes) b += st.bytes();
      for (auto& [n, dout] : sub.weight_douts) b += int64_t(dout.bytes());
    }
  return b;
}

}  // namespace merak::model
