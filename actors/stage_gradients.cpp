// The stage actor's end of a step (stage_state.hpp): gradient buckets to
// the reducer and back, tied-weight settlement, the ready report.

#include "actors/core_loan.hpp"
#include "actors/stage_state.hpp"
#include "comm/device_collectives.hpp"
#include "core/error.hpp"
#include "model/backend.hpp"

namespace merak::actors {
namespace {

// Bucket copies a backward may leave with the reducer under gradient shards
// before it waits for the oldest (the next one is filled meanwhile).
constexpr int64_t kmax_buckets_in_flight = 2;

// Bucket `id`'s reduced `sum` into its place: this replica's gradient shard,
// its owned slices of the whole gradients, or the whole gradients.
void apply_reduced(stage_state& st, int id, const model::tensor& sum) {
  auto& all = st.store->all();
  if (st.dist && st.dist->gradient_sharded(id)) {  // added to the gradient shard
    const auto [lo, hi] = st.dist->owned(id);
    if (sum.where().type == model::device::kind::cpu) {
      st.dist->add_owned_gradient(id, sum.f32() + lo);
    } else {  // the shard lives on the host
      model::tensor owned(model::shape_t{hi - lo});
      model::copy_bytes(owned, 0, sum, size_t(lo) * sizeof(float), owned.bytes());
      st.dist->add_owned_gradient(id, owned.f32());
    }
  } else if (st.dist && st.scatter.at(size_t(id))) {  // only this replica's shard is summed
    for (auto& pc : st.dist->owned_pieces(id))
      model::copy_bytes(all[size_t(pc.param)]->grad, size_t(pc.begin) * sizeof(float), sum,
                        size_t(pc.flat) * sizeof(float),
                        size_t(pc.end - pc.begin) * sizeof(float));
  } else {
    size_t at = 0;
    for (int p : st.buckets.at(size_t(id)).params) {
      model::copy_bytes(all[p]->grad, 0, sum, at, all[p]->grad.bytes());
      at += all[p]->grad.bytes();
    }
  }
}

// Gradient shards: the oldest bucket's result taken (waiting for it with
// `wait`), its copy let go.
void take_oldest(stage_state& st, bool wait) {
  MERAK_CHECK(!st.in_flight.empty(), "{}: a reduction result nobody handed over", where(st));
  if (wait) st.cfg.reductions->wait_for(st.taken_total + 1);
  auto [id, flat] = std::move(st.in_flight.front());
  st.in_flight.pop_front();
  apply_reduced(st, id, *flat);
  ++st.taken_total;
  auto& held = st.buckets.at(size_t(id)).flat;
  if (held == flat) held.reset();
}

// Copies the bucket's gradients into its flat buffer and hands it to the
// reducer (the buffer is reused once the reducer has let go of it: a fresh
// one costs a page fault per 4 KiB every step).
void ship(stage_self self, model::grad_bucket bucket) {
  auto& st = self->state;
  auto& all = st.store->all();
  auto& params = bucket.params;
  int64_t rows = 0, cols = 0;
  std::vector<int> known_rows;
  if (bucket.sparse) {
    const auto& g = all[size_t(params.front())]->grad;
    rows = g.dim(0);
    cols = g.dim(1);
    // Its non-zero rows are the step's token ids (when this stage sees them).
    if (st.known_rows_ok && int64_t(st.token_seen.size()) == rows)
      for (size_t k = 0; k < st.token_seen.size(); ++k)
        if (st.token_seen[k]) known_rows.push_back(int(k));
  }
  const int id = st.round_buckets++;
  bool scatter = false;
  if (st.dist) {  // the layout the distributed optimizer was built on
    MERAK_CHECK(id < st.dist->buckets() && params == st.dist->bucket_params(id),
                "{}: gradient bucket {} holds other parameters than the distributed "
                "optimizer's layout",
                where(st), id);
    scatter = st.scatter[size_t(id)];
  }
  // Gradient shards: whole gradients (tied weights, the sparse embedding)
  // accumulate over the micro-batches and leave once, after the last.
  if (st.cfg.reductions && !scatter && !st.final_backward) return;
  ++st.shipped;
  if (int(st.buckets.size()) <= id) st.buckets.resize(size_t(id) + 1);
  auto& b = st.buckets[size_t(id)];
  int64_t n = 0;
  bool missing = false;
  model::device on = model::device::cpu();
  for (int p : params) {
    n += model::shape_numel(all[p]->spec.shape);
    if (!all[p]->grad.defined())
      missing = true;
    else
      on = all[p]->grad.where();
  }
  // The flat buffer is host memory, or, for a dense bucket of gradients on
  // a device whose kind has device collectives (NCCL), on that device: the
  // reducer sums or reduce-scatters it there.
  const bool device_bucket = on.type != model::device::kind::cpu && !bucket.sparse &&
                             comm::has_device_collectives(on.type);
  const model::device flat_on = device_bucket ? on : model::device::cpu();
  if (!b.flat || b.flat.use_count() > 1 || b.flat->numel() != n || !(b.flat->where() == flat_on))
    b.flat = std::make_shared<model::tensor>(model::shape_t{n}, model::dtype::f32, flat_on);
  // Released gradients not added to by this backward (no node of theirs
  // reached the loss) count zero.
  if (missing) b.flat->fill_zero();
  size_t at = 0;
  for (int p : params) {
    const size_t bytes = model::shape_numel(all[p]->spec.shape) * sizeof(float);
    if (all[p]->grad.defined()) model::copy_bytes(*b.flat, at, all[p]->grad, 0, bytes);
    at += bytes;
  }
  note_gradient_peak(st);
  // The owned slice of the sum goes to the optimizer's shard: the whole
  // gradients are free until the next backward.
  if (st.dist && st.dist->gradient_sharded(id))
    for (int p : params) all[p]->grad = model::tensor();
  b.params = std::move(params);
  b.rows = rows;
  b.cols = cols;
  self->send(st.reducer, reduce_bucket{id, tensor_ref{b.flat}, rows, cols, std::move(known_rows),
                                       self, scatter});
  if (!st.cfg.reductions) return;
  st.in_flight.emplace_back(id, b.flat);
  ++st.handed_total;
  while (st.handed_total - st.taken_total > kmax_buckets_in_flight) take_oldest(st, true);
}

// After the ties and the reduction: report the gradient norm share.
void report_ready(stage_self self) {
  auto& st = self->state;
  const double sumsq = grad_sumsq_share(st);
  // The trace first: the coordinator stops listening once every stage is ready.
  if (st.cfg.trace)
    self->send(st.coordinator, stage_trace{coord(st), std::exchange(st.trace, {}),
                                           std::exchange(st.reducer_trace, {}),
                                           st.tp ? st.tp->take_trace() : trace_track{}});
  self->send(
      st.coordinator,
      stage_ready{coord(st), sumsq, st.busy_s,
                  st.reducer_bytes - std::exchange(st.reducer_bytes_reported, st.reducer_bytes),
                  st.sparse_union_rows, st.sparse_rel_error, memory_held(st)});
}

// Sends this stage's gradient (or the owner's sum) of tied weight `name` to
// stage `to`.
void send_tie(stage_self self, const partition::tie_settlement::send& s) {
  auto& st = self->state;
  self->send(
      st.stages[size_t(s.to)],
      tied_gradient{s.name, st.cfg.stage,
                    tensor_ref::make(st.store->find(s.name)->grad.to(model::device::cpu()))});
}

// Sums what can be summed; reports once every tie is settled.
void settle_owned(stage_self self) {
  auto& st = self->state;
  auto grad = [&](const std::string& name) -> model::tensor& { return st.store->find(name)->grad; };
  for (auto& s : st.ties->settle(grad)) send_tie(self, s);
  if (st.ties->finished()) report_ready(self);
}

// Slices of parameters that several TP shards hold (replicated K/V heads)
// have partial gradients on each: summed over the shards (every shard of
// the stage calls this with the same parameters in the same order).
void sum_replicated(stage_state& st) {
  if (!st.tp) return;
  std::vector<std::pair<model::parameter*, model::tensor>> packed;
  for (auto& prm : st.store->all()) {
    const auto& s = prm->spec.shard;
    if (s.copies() == 1) continue;
    auto buf = model::tensor::zeros({model::replicated_numel(s)});
    model::for_each_replicated_run(s, [&](int64_t at, int64_t from, int64_t n) {
      model::copy_bytes(buf, size_t(at) * 4, prm->grad, size_t(from) * 4, size_t(n) * 4);
    });
    packed.emplace_back(prm.get(), std::move(buf));
  }
  std::vector<int> tickets;
  for (auto& [prm, buf] : packed) tickets.push_back(st.tp->start_allreduce(buf));
  for (int t : tickets) st.tp->wait(t);
  for (auto& [prm, buf] : packed)
    model::for_each_replicated_run(prm->spec.shard, [&](int64_t at, int64_t to, int64_t n) {
      model::copy_bytes(prm->grad, size_t(to) * 4, buf, size_t(at) * 4, size_t(n) * 4);
    });
}

// The stage's gradients are final (backward and reduction done): replicated
// slices are summed over the TP shards, the tied weights are settled
// (partition/tie_settlement.hpp), then the stage is ready.
void settle_ties(stage_self self) {
  auto& st = self->state;
  sum_replicated(st);
  for (auto& s : st.ties->begin()) send_tie(self, s);
  settle_owned(self);
}

}  // namespace

void node_finished(stage_self self, int n) {
  auto& st = self->state;
  for (auto& b : st.bucketer->node_finished(n - st.cfg.first)) ship(self, std::move(b));
}

void micro_batch_backward_done(stage_self self) {
  auto& st = self->state;
  for (auto& b : st.bucketer->finish()) ship(self, std::move(b));
  st.bucketer->begin_step();
  st.round_buckets = 0;
}

void finish_backward(stage_self self) {
  auto& st = self->state;
  if (st.fetch) st.fetch->release_all();  // between steps only the value shards are held
  if (st.cfg.dp > 1) {
    for (auto& b : st.bucketer->finish()) ship(self, std::move(b));
    if (st.reduced < st.shipped) return;  // the last `reduced` continues
  }
  settle_ties(self);
}

void take_tied_gradient(stage_self self, tied_gradient& g) {
  auto& st = self->state;
  if (st.ties->owns(g.name)) {
    st.ties->holder_gradient(g.name, g.from_stage, g.grad.take());
    settle_owned(self);
  } else {  // the owner's sum
    auto prm = st.store->find(g.name);
    MERAK_CHECK(g.grad.t->bytes() == prm->grad.bytes(), "sum of '{}': {} bytes, not {}", g.name,
                g.grad.t->bytes(), prm->grad.bytes());
    model::copy_bytes(prm->grad, 0, *g.grad.t, 0, prm->grad.bytes());
    st.ties->owner_sum(g.name);
    if (st.ties->finished()) report_ready(self);
  }
}

void take_bucket_reduced(stage_self self, bucket_reduced& r) {
  auto& st = self->state;
  core_busy busy(st.cfg.cores.get(), st.cfg.core_index);
  if (st.cfg.trace) st.reducer_trace.push_back(std::move(r.slice));
  if (st.cfg.reductions) {  // the result is in the stage's own copy (maybe taken already)
    ++st.messages_total;
    while (st.taken_total < st.messages_total) take_oldest(st, false);
  } else {
    apply_reduced(st, r.bucket, *r.sum.t);
  }
  st.reducer_bytes = r.bytes_sent;
  if (st.buckets[size_t(r.bucket)].rows > 0) {
    st.sparse_union_rows = r.union_rows;
    st.sparse_rel_error = r.rel_error;
  }
  if (++st.reduced == st.shipped && st.finishing) settle_ties(self);
}

}  // namespace merak::actors
