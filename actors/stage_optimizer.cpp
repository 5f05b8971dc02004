// The stage actor's optimizer (stage_state.hpp): the step the coordinator
// orders, and the optimizer's part of checkpoints, for the plain AdamW and
// for the distributed optimizer (moments sharded over the replicas).
#include <algorithm>
#include <cstring>

#include "actors/core_loan.hpp"
#include "actors/stage_state.hpp"
#include "comm/device_collectives.hpp"
#include "core/error.hpp"
#include "model/backend.hpp"
#include "model/sharded_checkpoint.hpp"

namespace merak::actors {
namespace {

// Whether parameter `prm` counts in this shard's share of the global norm:
// a tied weight by its owner stage only, an unsplit weight by TP shard 0.
bool counts_in_norm(const stage_state& st, const model::parameter& prm) {
  for (auto& t : st.cfg.route.ties)
    if (t.name == prm.spec.name && t.owner != st.cfg.stage) return false;
  return st.cfg.tp_rank == 0 || prm.spec.shard.sharded();
}

void report_applied(stage_self self) {
  auto& st = self->state;
  self->send(st.coordinator, stage_applied{coord(st), {"adamw", st.update_t0, trace_now()}});
  st.in_step = false;  // the next step waits on the whole run's coordinator
}

// Where the all-gathers of updated values run: on the parameters' device
// when its kind has device collectives (NCCL), else in host memory.
model::device gather_device(const stage_state& st) {
  const model::device on = st.dist->where();
  return on.type != model::device::kind::cpu && comm::has_device_collectives(on.type)
             ? on
             : model::device::cpu();
}

// A flat buffer of bucket b's size for the all-gather of the updated
// values (gather_device), with this replica's slice packed in: the
// gradient buffer, free again after the reduction, when it is there.
std::shared_ptr<model::tensor> gather_buffer(stage_state& st, int b, bool reuse) {
  const model::device on = gather_device(st);
  auto flat = reuse ? st.buckets.at(size_t(b)).flat : nullptr;
  if (!flat || flat.use_count() > 1 || flat->numel() != st.dist->bucket_numel(b) ||
      !(flat->where() == on))
    flat = std::make_shared<model::tensor>(model::shape_t{st.dist->bucket_numel(b)},
                                           model::dtype::f32, on);
  st.dist->pack_owned_values(b, *flat);
  return flat;
}

// The all-gather of bucket b's values in `flat` (this replica's slice
// packed in), answered to `stage` or, with `fetch`, counted.
gather_bucket gather_message(const stage_state& st, int b, std::shared_ptr<model::tensor> flat,
                             stage_api stage, bool fetch) {
  gather_bucket g{b, tensor_ref{std::move(flat)}, std::move(stage), fetch};
  if (!st.gather_exact.empty()) {  // bf16 on the wire, the exact ranges as floats
    g.bf16 = true;
    g.exact = st.gather_exact[size_t(b)];
  }
  return g;
}

// Hands bucket b's buffer (this replica's slice packed in) to the reducer's
// all-gather; finish_gather takes its values.
void start_gather(stage_state& st, int b, std::shared_ptr<model::tensor> flat) {
  st.fetching[size_t(b)] = {++st.fetches_sent, flat};
  caf::anon_send(st.reducer, gather_message(st, b, std::move(flat), {}, true));
}

// Bucket b's values from its all-gather, waiting for it (nothing when none
// is out). Parameter shards gathered as bf16 hold their GEMM weights as
// bf16 only (parameter::lowp); the gathered bytes then count the values
// held in place of the buffer.
void finish_gather(stage_state& st, int b) {
  auto& [ticket, flat] = st.fetching[size_t(b)];
  if (!flat) return;
  st.cfg.fetched->wait_for(ticket);
  const bool lowp = st.fetch && !st.gather_exact.empty();
  st.dist->unpack_values(b, *flat, lowp ? model::dtype::bf16 : model::dtype::f32);
  if (st.fetch) st.gathered_bytes += st.dist->held_value_bytes(b) - int64_t(flat->bytes());
  flat.reset();
}

// Whether this shard writes parameter `prm` into checkpoints: its slices of
// split weights, the unsplit ones on TP shard 0 only, tied weights on their
// owner stage only.
bool writes(const stage_state& st, const model::parameter& prm) {
  bool owned = prm.spec.shard.sharded() || st.cfg.tp_rank == 0;
  for (auto& t : st.cfg.route.ties)
    if (t.name == prm.spec.name) owned = owned && t.owner == st.cfg.stage;
  return owned;
}

// Writes the shard file of the parameters this shard writes, with their
// moments m[i], v[i] (parallel to the store's parameters; both empty: the
// values alone).
std::vector<model::shard_record> write_own_shard(const stage_state& st, const std::string& dir,
                                                 const model::metadata_map& meta,
                                                 const std::vector<const model::tensor*>& m,
                                                 const std::vector<const model::tensor*>& v) {
  std::vector<const model::parameter*> params;
  std::vector<const model::tensor*> mine_m, mine_v;
  auto& all = st.store->all();
  for (size_t i = 0; i < all.size(); ++i) {
    if (!writes(st, *all[i])) continue;
    params.push_back(all[i].get());
    if (!m.empty()) {
      mine_m.push_back(m[i]);
      mine_v.push_back(v[i]);
    }
  }
  return model::write_shard(dir, model::shard_file_name(st.cfg.stage, st.cfg.tp_rank), params,
                            mine_m, mine_v, meta);
}

}  // namespace

void setup_distributed_optimizer(stage_state& st) {
  // The bucketer's buckets for the order every step's backward finishes
  // the nodes in.
  std::vector<std::vector<int>> layout;
  auto& b = *st.bucketer;
  b.begin_step();
  for (int k : st.exec->backward_finish_order(st.cfg.policy.split_weight))
    for (auto& x : b.node_finished(k)) layout.push_back(x.params);
  for (auto& x : b.finish()) layout.push_back(x.params);
  b.begin_step();
  auto& all = st.store->all();
  for (auto& params : layout) {
    bool whole = false;  // tied weights are settled between stages on whole gradients
    for (int p : params) {
      for (auto& t : st.cfg.route.ties) whole = whole || t.name == all[size_t(p)]->spec.name;
      whole = whole || all[size_t(p)]->spec.name == st.cfg.sparse_param;
    }
    st.scatter.push_back(whole ? 0 : 1);
  }
  st.dist = std::make_unique<model::distributed_adamw>(st.cfg.adam, all, std::move(layout),
                                                       st.cfg.dp, st.cfg.dp_rank);
  if (st.cfg.graph->activation_type() == model::dtype::bf16)
    for (int b = 0; b < st.dist->buckets(); ++b) {
      auto& exact = st.gather_exact.emplace_back();
      for (auto [lo, hi] : st.dist->exact_ranges(b)) {
        exact.push_back(int64_t(lo));
        exact.push_back(int64_t(hi));
      }
    }
  if (st.cfg.reductions) {
    st.dist->keep_gradient_shards(st.scatter);
    // Whole gradients exist only during a backward, from the first node
    // that adds to one until its bucket leaves.
    for (int b = 0; b < st.dist->buckets(); ++b)
      if (st.dist->gradient_sharded(b))
        for (int p : st.dist->bucket_params(b)) all[size_t(p)]->grad = model::tensor();
  }
  if (!st.cfg.fetched) return;
  for (int n = st.cfg.first; n < st.cfg.last; ++n) {
    std::vector<int> buckets;
    for (auto& spec : st.cfg.graph->nodes()[size_t(n)].params)
      for (size_t p = 0; p < all.size(); ++p)
        if (all[p]->spec.name == spec.name) {
          const int b = st.dist->bucket_of(int(p));
          if (std::find(buckets.begin(), buckets.end(), b) == buckets.end()) buckets.push_back(b);
        }
    st.node_buckets.push_back(std::move(buckets));
  }
  st.fetching.resize(size_t(st.dist->buckets()));
  if (st.cfg.shard_parameters) {
    setup_parameter_shards(st);
    return;
  }
  st.exec->set_parameter_hook([&st](int n, int) { take_gathered_values(st, n); });
}

void setup_parameter_shards(stage_state& st) {
  auto& dist = *st.dist;
  dist.keep_value_shards();
  for (int b = 0; b < dist.buckets(); ++b) dist.release_values(b);
  model::parameter_fetcher::hooks h;
  h.request = [&st](int b) {
    auto flat = gather_buffer(st, b, false);
    st.gathered_bytes += int64_t(flat->bytes());
    st.gathered_peak = std::max(st.gathered_peak, st.gathered_bytes);
    start_gather(st, b, std::move(flat));
  };
  h.take = [&st](int b) { finish_gather(st, b); };
  h.release = [&st](int b) {
    st.gathered_bytes -= st.dist->held_value_bytes(b);
    st.dist->release_values(b);
  };
  st.fetch = std::make_unique<model::parameter_fetcher>(st.node_buckets, st.cfg.first,
                                                        dist.buckets(), std::move(h));
  st.exec->set_parameter_hook([&st](int n, int next) { st.fetch->before_node(n, next); });
  st.exec->set_parameter_span_hook([&st](int lo, int hi) { st.fetch->hold(lo, hi); });
  st.exec->set_transient_parameters(true);
}

double grad_sumsq_share(const stage_state& st) {
  auto& all = st.store->all();
  double sumsq = 0;
  if (st.dist) {  // this replica's shard; the coordinator adds the replicas
    sumsq = st.dist->owned_sumsq([&](int p) { return counts_in_norm(st, *all[size_t(p)]); });
  } else {
    for (auto& prm : all)
      if (counts_in_norm(st, *prm))
        sumsq += model::backend_for(prm->grad.where()).sum_squares(prm->grad);
  }
  // Slices held by several TP shards count once: each holder adds 1/copies.
  for (size_t p = 0; p < all.size(); ++p) {
    const auto& s = all[p]->spec.shard;
    if (s.copies() == 1) continue;
    const auto host = all[p]->grad.to(model::device::cpu());
    const double share = 1.0 - 1.0 / s.copies();
    if (!st.dist) {
      sumsq -= share * model::replicated_sumsq(s, host, 0, host.numel());
      continue;
    }
    const int b = st.dist->bucket_of(int(p));
    if (b >= 0)
      for (auto& pc : st.dist->owned_pieces(b))
        if (pc.param == int(p)) sumsq -= share * model::replicated_sumsq(s, host, pc.begin, pc.end);
  }
  return sumsq;
}

namespace {

// Gradient bytes held now: the parameters' gradients, the bucket copies
// (kept for reuse, or out with the reducer) and the gradient shards.
int64_t gradient_bytes(const stage_state& st) {
  int64_t n = 0;
  for (auto& prm : st.store->all()) n += prm->grad.bytes();
  for (auto& b : st.buckets)
    if (b.flat) n += b.flat->bytes();
  for (auto& [id, flat] : st.in_flight)
    if (st.buckets.at(size_t(id)).flat != flat) n += flat->bytes();
  if (st.dist) n += st.dist->gradient_shard_bytes();
  return n;
}

}  // namespace

void note_gradient_peak(stage_state& st) {
  st.gradients_peak = std::max(st.gradients_peak, gradient_bytes(st));
}

memory_use memory_held(const stage_state& st) {
  memory_use m;
  for (auto& prm : st.store->all()) m.parameters += prm->value.bytes();
  m.gradients = gradient_bytes(st);
  m.gradients_peak = std::max(st.gradients_peak, m.gradients);
  if (st.dist) {
    // Parameter shards: the slices, and the most values gathered at once
    // (each bucket's buffer while its all-gather runs, then its values).
    m.parameters += st.dist->value_shard_bytes() + st.gathered_peak;
    m.optimizer = st.dist->moment_bytes();
  } else if (st.opt) {
    for (auto& x : st.opt->first_moments()) m.optimizer += x.bytes();
    for (auto& x : st.opt->second_moments()) m.optimizer += x.bytes();
  }
  m.activations_peak = st.exec->activation_peak();
  return m;
}

void apply_step_update(stage_self self, const apply_update& u) {
  auto& st = self->state;
  core_busy busy(st.cfg.cores.get(), st.cfg.core_index);
  st.update_t0 = trace_now();
  if (u.skip) {
    st.store->zero_grads();
    if (st.dist) st.dist->zero_gradient_shards();
  } else if (!st.dist) {
    st.opt->step(u.lr, u.clip, true);  // gradients scaled, used and zeroed in one pass
  } else if (st.fetch) {
    // The value shards are updated; the next node that reads a bucket
    // gathers it.
    st.fetch->release_all();
    st.dist->step(u.lr, u.clip, true);
  } else if (st.cfg.fetched) {
    // The next forward takes each bucket as it needs it: the first stage's
    // nodes' buckets (the last made in backward) are gathered first.
    take_gathered_values(st, -1);
    st.dist->step(u.lr, u.clip, true);
    for (int b = st.dist->buckets() - 1; b >= 0; --b)
      start_gather(st, b, gather_buffer(st, b, true));
  } else {
    // This replica's slices, then every replica's updated slices to all.
    st.dist->step(u.lr, u.clip, true);
    for (int b = 0; b < st.dist->buckets(); ++b) {
      auto flat = gather_buffer(st, b, true);
      ++st.gathers;
      self->send(st.reducer, gather_message(st, b, flat, self, false));
    }
    if (st.gathers > 0) return;  // the last bucket_gathered reports
  }
  report_applied(self);
}

void take_gathered_values(stage_state& st, int n) {
  if (n >= 0) {
    for (int b : st.node_buckets[size_t(n - st.cfg.first)]) finish_gather(st, b);
  } else {
    for (int b = 0; b < int(st.fetching.size()); ++b) finish_gather(st, b);
  }
}

void take_bucket_gathered(stage_self self, bucket_gathered& g) {
  auto& st = self->state;
  MERAK_CHECK(st.dist && st.gathers > 0, "{}: an all-gather nobody asked for (bucket {})",
              where(st), g.bucket);
  --st.gathers;
  core_busy busy(st.cfg.cores.get(), st.cfg.core_index);
  st.dist->unpack_values(g.bucket, *g.flat.t);
  if (st.gathers == 0) report_applied(self);
}

void save_own_shard(stage_self self, const save_shard& m) {
  auto& st = self->state;
  if (st.cfg.fetched && !st.fetch) take_gathered_values(st, -1);
  auto meta = m.meta;  // and this shard's AdamW step count
  meta["merak.adam_t"] = std::to_string(st.dist ? st.dist->t() : st.opt->t());
  if (!st.dist) {
    std::vector<const model::tensor*> pm, pv;
    for (auto& x : st.opt->first_moments()) pm.push_back(&x);
    for (auto& x : st.opt->second_moments()) pv.push_back(&x);
    self->send(st.coordinator,
               shard_saved{coord(st), write_own_shard(st, m.dir, meta, pm, pv), st.opt->t()});
    return;
  }
  // Each replica holds the moments of its slices: replica 0 writes the
  // values, every replica its moments' pieces, nothing gathered.
  // Parameter shards, and bf16 all-gathers (which leave only each replica's
  // own slices exact): each replica writes its slices of the values with
  // its moments' pieces, and no shard file holds whole values.
  const bool value_pieces = st.fetch || !st.gather_exact.empty();
  std::vector<model::shard_record> records;
  if (st.cfg.dp_rank == 0 && !value_pieces) records = write_own_shard(st, m.dir, meta, {}, {});
  std::vector<model::moment_piece> pieces;
  auto& all = st.store->all();
  for (int b = 0; b < st.dist->buckets(); ++b)
    for (auto& pc : st.dist->owned_pieces(b)) {
      auto& prm = *all[size_t(pc.param)];
      if (!writes(st, prm)) continue;
      auto [pm, pv] = st.dist->piece_moments(b, pc);
      pieces.push_back({&prm.spec, pc.begin, pc.end, pm, pv,
                        value_pieces ? st.dist->piece_values(b, pc) : nullptr});
    }
  auto mine = model::write_moment_pieces(
      m.dir, model::moment_file_name(st.cfg.stage, st.cfg.tp_rank, st.cfg.dp_rank), pieces, meta);
  records.insert(records.end(), mine.begin(), mine.end());
  self->send(st.coordinator, shard_saved{coord(st), std::move(records), st.dist->t()});
}

void restore_own_shard(stage_self self, const restore_shard& m) {
  auto& st = self->state;
  if (st.cfg.fetched && !st.fetch) take_gathered_values(st, -1);
  model::checkpoint_reader ckpt(m.dir);
  auto& all = st.store->all();
  if (!st.dist) {
    std::vector<model::parameter*> params;
    for (auto& p : all) params.push_back(p.get());
    model::load_parameters(ckpt, params, st.opt.get());
    self->send(st.coordinator, shard_restored{coord(st)});
    return;
  }
  // One parameter at a time: its value and moments read whole, this
  // replica's slices kept, the rest let go of before the next, so a resume
  // holds one tensor's value and moments beyond the shards. Parameter
  // shards keep no whole value at all.
  if (st.fetch) st.fetch->release_all();
  for (size_t i = 0; i < all.size(); ++i) {
    auto& p = *all[i];
    model::tensor value, mo(p.spec.shape), vo(p.spec.shape);
    model::tensor& into = st.fetch ? value : p.value;
    if (!into.defined()) into = model::tensor(p.spec.shape);
    model::read_holder_part(ckpt, p.spec.name, p.spec, into);
    model::read_holder_part(ckpt, "m." + p.spec.name, p.spec, mo);
    model::read_holder_part(ckpt, "v." + p.spec.name, p.spec, vo);
    // The owned values to the optimizer when it keeps them (parameter
    // shards, device parameters), from the host.
    model::tensor staged;
    const model::tensor* master = nullptr;
    if (st.dist->values_sharded())
      master = into.where().type == model::device::kind::cpu
                   ? &into
                   : &(staged = into.to(model::device::cpu()));
    st.dist->load_parameter(int(i), master, mo, vo);
  }
  st.dist->set_t(model::load_adam_t(ckpt));
  self->send(st.coordinator, shard_restored{coord(st)});
}

}  // namespace merak::actors
