#include "actors/actor_errors.hpp"
#include "actors/stage_actor.hpp"
#include "actors/stage_state.hpp"

#include <omp.h>

#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>

#include <fmt/format.h>

#include "actors/core_loan.hpp"
#include "actors/idle_wait.hpp"
#include "actors/messages.hpp"
#include "model/grad_buckets.hpp"
#include "comm/stream_tp_group.hpp"
#include "core/error.hpp"
#include "model/backend.hpp"
#include "model/executor.hpp"
#include "model/sharded_checkpoint.hpp"
#include "partition/recompute.hpp"
#include "partition/tie_settlement.hpp"

namespace merak::actors {

namespace {

using clock = std::chrono::steady_clock;

// A time point as trace_now() reports it.
double seconds(clock::time_point t) {
  return std::chrono::duration<double>(t.time_since_epoch()).count();
}

// Interleaved layouts: this actor's pipeline device and model chunk.
int devices(const stage_state& st) {
  return st.cfg.pp / st.cfg.chunks;
}
int device(const stage_state& st) {
  return st.cfg.stage % devices(st);
}
int chunk(const stage_state& st) {
  return st.cfg.stage / devices(st);
}

void rebalance_loan(stage_state& st);

void setup_state(stage_state& st, stage_setup cfg) {
  st.cfg = std::move(cfg);
  st.store = std::make_unique<model::parameter_store>(st.cfg.seed, st.cfg.where);
  st.exec = std::make_unique<model::executor>(*st.cfg.graph, *st.store, st.cfg.first, st.cfg.last);
  st.exec->set_selective_recompute(st.cfg.recompute_attention);
  if (!(st.cfg.distributed_optimizer && st.cfg.dp > 1))
    st.opt = std::make_unique<model::adamw>(st.cfg.adam, st.store->all());
  if (st.cfg.tp > 1) {
    MERAK_CHECK(st.cfg.tp_link && st.cfg.tp_link->size() == st.cfg.tp, "TP endpoint of {} ranks",
                st.cfg.tp_link ? st.cfg.tp_link->size() : 0);
    st.tp = std::make_unique<comm::stream_tp_group>(st.cfg.tp_link, st.cfg.trace);
    st.exec->set_tp(st.tp.get(), st.cfg.tp_overlap);
  }
  if (st.cfg.cores) st.exec->set_node_hook([&st] { rebalance_loan(st); });
  for (auto& r : st.cfg.route.output_readers) st.grads_expected += int(r.size());
  st.ties = std::make_unique<partition::tie_settlement>(st.cfg.stage, st.cfg.route.ties);
  if (st.cfg.dp > 1 && !st.cfg.sparse_param.empty()) {
    int users = 0, embeddings = 0;
    for (int n = st.cfg.first; n < st.cfg.last; ++n)
      for (auto& spec : st.cfg.graph->nodes()[n].params)
        if (spec.name == st.cfg.sparse_param) {
          ++users;
          if (st.cfg.graph->nodes()[n].kind == "embedding" && !spec.shard.sharded()) ++embeddings;
        }
    st.tokens_value = st.cfg.graph->find_value("tokens");
    auto& ins = st.exec->input_values();
    st.known_rows_ok = users == 1 && embeddings == 1 &&
                       std::find(ins.begin(), ins.end(), st.tokens_value) != ins.end();
  }
  if (st.cfg.dp > 1) {
    std::vector<std::string> names;
    std::vector<int64_t> bytes;
    int sparse = -1;  // the token embedding's full gradient, through the codec
    std::vector<int> alone;  // gradient shards: tied weights reduced whole, by themselves
    auto& all = st.store->all();
    for (size_t i = 0; i < all.size(); ++i) {
      names.push_back(all[i]->spec.name);
      bytes.push_back(int64_t(all[i]->value.bytes()));
      if (!st.cfg.sparse_param.empty() && all[i]->spec.name == st.cfg.sparse_param &&
          all[i]->value.rank() == 2)
        sparse = int(i);
      if (st.cfg.reductions)
        for (auto& t : st.cfg.route.ties)
          if (t.name == all[i]->spec.name) alone.push_back(int(i));
    }
    st.bucketer = std::make_unique<model::grad_bucketer>(
        std::move(bytes),
        model::gradients_final_after(*st.cfg.graph, st.cfg.first, st.cfg.last, names), sparse,
        st.cfg.bucket_bytes, alone, st.exec->late_gradient_nodes());
    if (st.cfg.distributed_optimizer) setup_distributed_optimizer(st);
  }
}

void pump(stage_self self);

}  // namespace

namespace {

void rebalance_loan(stage_state& st) {
  if (st.loan && st.loan->active()) st.loan->rebalance();
}

// Work is about to be handed to stage `s` of this replica.
void waking(const stage_state& st, int s) {
  if (st.cfg.cores) st.cfg.cores->wake(st.cfg.core_index - device(st) + s % devices(st));
}

// Sends an activation (tensor_kind::input), a gradient (tensor_kind::grad) or a validation input
// (tensor_kind::eval) to stage `s` of this line: by reference in this process, through
// the tensor channel to another. Training work marks the receiver's cores
// busy first (core_pool.hpp).
void hand_on(stage_self self, int s, tensor_kind kind, int mb, int value, model::tensor x) {
  auto& st = self->state;
  if (kind != tensor_kind::eval) waking(st, s);
  if (st.cfg.channel && st.cfg.line_rank[size_t(s)] >= 0) {
    // A device tensor over the peer's device link, else through a host copy
    // (the channel decides); the receiver's executor moves it on.
    st.cfg.channel->send(st.cfg.line_rank[size_t(s)],
                         {st.cfg.line_index[size_t(s)], int32_t(kind), mb, value},
                         std::make_shared<const model::tensor>(std::move(x)));
  } else {
    self->send(st.stages[size_t(s)], stage_tensor{kind, mb, value, tensor_ref::make(std::move(x))});
  }
}

// Hands each output of a forward of `mb` to the stages that read it.
void hand_out(stage_self self, tensor_kind kind, int mb, std::vector<model::tensor>& outputs) {
  auto& st = self->state;
  for (size_t i = 0; i < outputs.size(); ++i) {
    auto& readers = st.cfg.route.output_readers[i];
    for (size_t k = 0; k < readers.size(); ++k)
      hand_on(self, readers[k], kind, mb, st.exec->output_values()[i],
              k + 1 == readers.size() ? std::move(outputs[i]) : outputs[i].clone());
  }
}

// Files input `value` of micro-batch (or validation forward) `mb` in
// `slots`; returns whether all of its inputs are there. `what` names the
// kind of input in the error for a value this stage does not read.
bool file_input(stage_state& st, std::map<int, std::vector<model::tensor>>& slots,
                std::map<int, int>& seen, int mb, int value, model::tensor x, const char* what) {
  auto& ins = st.exec->input_values();
  auto it = std::find(ins.begin(), ins.end(), value);
  MERAK_CHECK(it != ins.end(), "{} for value {} that this stage does not read", what, value);
  auto& slot = slots[mb];
  if (slot.empty()) slot.resize(ins.size());
  slot[size_t(it - ins.begin())] = std::move(x);
  return ++seen[mb] == int(ins.size());
}

// `computed` runs between the op's compute and the hand-off of its outputs
// and returns whether the stage has another op it can run now.
template <typename Computed>
void run_op(stage_self self, const partition::op& operation, Computed&& computed) {
  auto& st = self->state;
  auto& ex = *st.exec;
  auto t0 = clock::now();
  core_loan cores(st.cfg.cores.get(), st.cfg.core_index, st.cfg.threads, st.cfg.max_borrow);
  st.loan = &cores;  // for the executor's node hook, while the op runs
  struct forget_loan {
    stage_state& st;
    ~forget_loan() { st.loan = nullptr; }
  } forget{st};
  switch (operation.kind) {
    case partition::op_kind::F:
    case partition::op_kind::Fpc: {
      auto in = std::move(st.inputs[operation.mb]);
      st.inputs.erase(operation.mb);
      auto r = ex.forward(operation.mb, std::move(in), operation.kind == partition::op_kind::F);
      cores.compute_done(computed());
      hand_out(self, tensor_kind::input, operation.mb, r.outputs);
      if (ex.computes_loss() && st.cfg.tp_rank == 0)  // every shard has the same loss
        self->send(st.coordinator, micro_batch_loss{st.cfg.dp_rank, operation.mb, r.loss});
      break;
    }
    case partition::op_kind::R:
      ex.recompute(operation.mb);
      cores.compute_done(computed());
      break;
    case partition::op_kind::B: {
      std::vector<model::tensor> g;
      if (!ex.output_values().empty()) {
        g = std::move(st.grads[operation.mb]);
        st.grads.erase(operation.mb);
        st.grads_seen.erase(operation.mb);
      }
      std::function<void(int)> done;
      st.final_backward = operation.mb == st.cfg.policy.micro_batches - 1;
      const bool ships = st.cfg.dp > 1 && (st.final_backward || st.cfg.reductions);
      if (ships) done = [self](int n) { node_finished(self, n); };
      // zb-h1: the weight gradients wait for this micro-batch's W.
      auto dx = ex.backward(operation.mb, std::move(g), st.cfg.loss_scale, done,
                            st.cfg.policy.split_weight);
      if (ships && !st.final_backward) micro_batch_backward_done(self);
      cores.compute_done(computed());
      for (size_t i = 0; i < dx.size(); ++i) {
        int producer = st.cfg.route.input_producer[i];
        if (producer < 0 || !dx[i].defined()) continue;
        hand_on(self, producer, tensor_kind::grad, operation.mb, ex.input_values()[i],
                std::move(dx[i]));
      }
      break;
    }
    case partition::op_kind::W: {
      std::function<void(int)> done;
      if (st.cfg.dp > 1 && operation.mb == st.cfg.policy.micro_batches - 1)
        done = [self](int n) { node_finished(self, n); };
      ex.weight_backward(operation.mb, done);
      cores.compute_done(computed());
      break;
    }
  }
  auto t1 = clock::now();
  st.busy_s += std::chrono::duration<double>(t1 - t0).count();
  if (st.cfg.trace) st.trace.push_back({partition::op_name(operation), seconds(t0), seconds(t1)});
}

// Runs the ops another actor decides: a TP shard other than 0 (its stage's
// shard 0 decides), or a chunk other than 0 (its device's chunk 0 decides).
bool follower(const stage_state& st) {
  return st.cfg.tp_rank > 0 || chunk(st) > 0;
}

// The device's chunk 0, which schedules this chunk.
const stage_api& device_lead(const stage_state& st) {
  return st.stages[size_t(device(st))];
}

// Every input (tensor_kind::input) or output gradient (tensor_kind::grad) of `mb` is here: the
// scheduler that decides this actor's ops learns it (the caller pumps).
void arrived(stage_self self, tensor_kind kind, int mb) {
  auto& st = self->state;
  (kind == tensor_kind::input ? st.have_inputs : st.have_grads).insert(mb);
  if (chunk(st) > 0) {
    if (st.cfg.tp_rank == 0) self->send(device_lead(st), chunk_ready{kind, mb, chunk(st)});
  } else if (kind == tensor_kind::input) {
    st.sched->activation_arrived(mb);
  } else {
    st.sched->gradient_arrived(mb);
  }
}

// A follower may run the leader's next op once its own inputs are here.
bool can_run(const stage_state& st, const partition::op& operation) {
  switch (operation.kind) {
    case partition::op_kind::F:
    case partition::op_kind::Fpc:
      return st.have_inputs.count(operation.mb) > 0;
    case partition::op_kind::B:
      return st.exec->output_values().empty() || st.have_grads.count(operation.mb) > 0;
    case partition::op_kind::R:
    case partition::op_kind::W:
      return true;
  }
  return false;
}

void after_op(stage_self self, const partition::op& operation) {
  auto& st = self->state;
  if (operation.kind == partition::op_kind::F || operation.kind == partition::op_kind::Fpc)
    st.have_inputs.erase(operation.mb);
  if (operation.kind == partition::op_kind::B) {
    st.have_grads.erase(operation.mb);
    ++st.backwards;
  }
  if (operation.kind == partition::op_kind::W) ++st.weights;
}

void pump(stage_self self) {
  auto& st = self->state;
  if (!st.sched || st.finishing) return;
  if (follower(st)) {
    const bool commands_shards = st.cfg.tp_rank == 0;  // a chunk above 0
    while (!st.commanded.empty() && can_run(st, st.commanded.front())) {
      auto o = st.commanded.front();
      st.commanded.pop_front();
      if (commands_shards)
        for (size_t t = 1; t < st.tp_peers.size(); ++t) self->send(st.tp_peers[t], tp_command{o});
      run_op(self, o, [] { return false; });
      after_op(self, o);
      if (commands_shards) self->send(device_lead(st), chunk_done{o});
    }
    const int m = st.cfg.policy.micro_batches;
    if (st.backwards == m && (!st.cfg.policy.split_weight || st.weights == m)) {
      st.finishing = true;
      finish_backward(self);
    }
    return;
  }
  if (st.awaiting_chunk) return;  // the device is running another chunk's op
  while (auto o = st.sched->next()) {
    if (o->chunk != chunk(st)) {  // another chunk of this device runs it; it answers chunk_done
      const int s = o->chunk * devices(st) + device(st);
      self->send(st.stages[size_t(s)], chunk_command{*o});
      st.awaiting_chunk = true;
      return;
    }
    for (size_t t = 1; t < st.tp_peers.size(); ++t) self->send(st.tp_peers[t], tp_command{*o});
    run_op(self, *o, [&] {
      st.sched->completed(*o);
      // A message waiting may be work: keep the core rather than lend it
      // for the moment until that message is read.
      return st.sched->has_eligible() || !self->mailbox().empty();
    });
    after_op(self, *o);
    // Arrivals may change the next choice: let them in first. With an empty
    // mailbox, go on directly (a message to self costs a few microseconds).
    if (!self->mailbox().empty()) {
      self->send(self, pump_next{});
      return;
    }
  }
  if (st.cfg.cores) st.cfg.cores->sleep(st.cfg.core_index);  // nothing to run now
  if (st.sched->done()) {
    st.finishing = true;
    finish_backward(self);
  }
}

// Runs a handler; an exception ends the actor with a `failed` message naming
// it. During a step the stage then polls for its next message (idle_wait.hpp).
template <typename F>
void guarded(stage_self self, F&& f) {
  try {
    f();
    if (self->state.in_step)
      // Polls while its core is its own; once an op elsewhere has borrowed
      // the core, the stage blocks instead of taking time from that op.
      spin_until(
          [self] {
            auto& cfg = self->state.cfg;
            return !self->mailbox().empty() || (cfg.cores && cfg.cores->lent_away(cfg.core_index));
          },
          self->state.spin);
  } catch (const std::exception& e) {
    auto what = fmt::format("{}: {}", where(self->state), e.what());
    self->send(self->state.coordinator, job_failed{what});
    self->quit(caf::make_error(caf::sec::runtime_error, what));
  }
}

// An activation or graph input of micro-batch `mb` (x by reference: take()
// can move it).
void take_input(stage_self self, int mb, int value, tensor_ref& x) {
  auto& st = self->state;
  if (st.known_rows_ok && value == st.tokens_value) {
    const int32_t* ids = x.t->data<int32_t>();
    for (int64_t i = 0; i < x.t->numel(); ++i) {
      MERAK_CHECK(ids[i] >= 0 && size_t(ids[i]) < st.token_seen.size(),
                  "token id {} outside [0, {})", ids[i], st.token_seen.size());
      st.token_seen[size_t(ids[i])] = 1;
    }
  }
  if (!file_input(st, st.inputs, st.inputs_seen, mb, value, x.take(), "input")) return;
  st.inputs_seen.erase(mb);
  if (!st.in_step) {  // the next step's, ahead of its step message
    st.early_inputs.push_back(mb);
    return;
  }
  arrived(self, tensor_kind::input, mb);
  pump(self);
}

// The gradient of output `value` of micro-batch `mb`: several readers' are
// summed.
void take_grad(stage_self self, int mb, int value, tensor_ref& g) {
  auto& st = self->state;
  auto& outs = st.exec->output_values();
  auto it = std::find(outs.begin(), outs.end(), value);
  MERAK_CHECK(it != outs.end(), "gradient for value {} that this stage does not produce", value);
  auto& slot = st.grads[mb];
  if (slot.empty()) slot.resize(outs.size());
  auto& dst = slot[size_t(it - outs.begin())];
  if (!dst.defined()) {
    dst = g.take();
  } else if (dst.where() == g.t->where()) {
    model::backend_for(dst.where()).accumulate(dst, *g.t);
  } else {  // one reader in this process, one in another: sum on the stage's device
    if (!(dst.where() == st.store->where())) dst = dst.to(st.store->where());
    const model::tensor there = g.t->to(dst.where());
    model::backend_for(dst.where()).accumulate(dst, there);
  }
  if (++st.grads_seen[mb] == st.grads_expected) {
    arrived(self, tensor_kind::grad, mb);
    pump(self);
  }
}

// The device's chunk 0: chunk r.chunk has what an op of `r.mb` needs.
void take_chunk_ready(stage_self self, const chunk_ready& r) {
  auto& st = self->state;
  MERAK_CHECK(chunk(st) == 0 && st.cfg.chunks > 1 && r.chunk > 0 && r.chunk < st.cfg.chunks,
              "chunk_ready from chunk {} of {}", r.chunk, st.cfg.chunks);
  if (r.kind == tensor_kind::input)
    st.sched->activation_arrived(r.mb, r.chunk);
  else
    st.sched->gradient_arrived(r.mb, r.chunk);
}

// An input of validation forward `seq` (replica 0 only; every replica under
// parameter shards, whose all-gathers need them all, replica 0 reporting):
// forwards run in sequence order, so the TP shards of a stage sum in step.
void take_eval(stage_self self, int seq, int value, tensor_ref& x) {
  auto& st = self->state;
  file_input(st, st.eval_inputs, st.eval_seen, seq, value, x.take(), "validation input");
  const int n = int(st.exec->input_values().size());
  while (st.eval_seen.count(st.next_eval) && st.eval_seen[st.next_eval] == n) {
    const int s = st.next_eval++;
    auto in = std::move(st.eval_inputs[s]);
    st.eval_inputs.erase(s);
    st.eval_seen.erase(s);
    auto r = st.exec->infer(std::move(in));
    if (st.fetch) st.fetch->release_all();  // after each forward, alike on every replica
    hand_out(self, tensor_kind::eval, s, r.outputs);
    if (st.exec->computes_loss() && st.cfg.tp_rank == 0 && st.cfg.dp_rank == 0)
      self->send(st.coordinator, eval_loss{s, r.loss});
  }
}

}  // namespace

namespace {

// stage_wiring: its neighbours, reducer, coordinator and TP peers; sets up
// the executor and reports its memory to the scheduler.
void take_wiring(stage_self self, const stage_setup& setup, stage_wiring& w) {
  auto& st = self->state;
  st.stages = std::move(w.line);
  st.tp_peers = std::move(w.tp_peers);
  st.reducer = std::move(w.reducer);
  st.coordinator = std::move(w.coordinator);
  guarded(self, [&] {
    omp_set_num_threads(std::max(1, setup.threads));  // this actor's thread only
    setup_state(st, setup);
    st.spin = spin_budget(setup.spin_us, setup.busy_threads);
    auto m = partition::describe_stage(*st.cfg.graph, st.cfg.stage, st.cfg.first, st.cfg.last,
                                       st.cfg.tokens_per_micro_batch, 1, nullptr,
                                       st.cfg.recompute_layers);
    // Recomputation rebuilds one segment at a time inside backward.
    st.exec->set_segments(partition::segment_starts(m));
    if (st.cfg.reports_memory) self->send(w.scheduler, memory_report{std::move(m)});
  });
}

// The scheduler's plan: this stage's policy and its recomputed nodes.
void take_plan(stage_self self, stage_plan& plan) {
  auto& p = self->state.cfg.policy;
  MERAK_CHECK(plan.policy.stage == p.stage && plan.policy.stages == p.stages &&
                  plan.policy.micro_batches == p.micro_batches &&
                  plan.policy.split_weight == p.split_weight,
              "the scheduler's plan is for stage {} of {} with {} micro-batches{}",
              plan.policy.stage, plan.policy.stages, plan.policy.micro_batches,
              plan.policy.split_weight ? ", weight gradients split" : "");
  p = std::move(plan.policy);
  self->state.exec->set_checkpoint(plan.checkpoint_nodes);
  self->state.exec->set_selective_recompute(self->state.cfg.recompute_attention || plan.selective);
}

// A new step: a fresh schedule, the counters reset, and what arrived ahead
// of this message taken in.
void start_step(stage_self self) {
  auto& st = self->state;
  // Parameter shards: the replicas' all-gathers pair up only if every
  // replica of this stage runs one order, fixed by the scheduler actor.
  MERAK_CHECK(!st.fetch || !st.cfg.policy.order.empty(),
              "{}: parameter shards without a fixed op order", where(st));
  st.sched = std::make_unique<partition::stage_scheduler>(st.cfg.policy);
  st.in_step = true;
  st.finishing = false;
  st.backwards = 0;
  st.weights = 0;
  st.awaiting_chunk = false;
  st.shipped = st.reduced = st.round_buckets = 0;
  if (st.bucketer) st.bucketer->begin_step();
  st.busy_s = 0;
  st.exec->reset_activation_peak();
  st.gathered_peak = st.gathered_bytes;
  st.gradients_peak = 0;
  st.trace.clear();
  st.reducer_trace.clear();
  if (st.known_rows_ok)
    st.token_seen.assign(size_t(st.store->find(st.cfg.sparse_param)->spec.shape[0]), 0);
  for (int mb : std::exchange(st.early_inputs, {})) arrived(self, tensor_kind::input, mb);
  for (auto& r : std::exchange(st.early_ready, {})) take_chunk_ready(self, r);
  pump(self);
}

void take_tensor(stage_self self, stage_tensor& in) {
  switch (in.kind) {
    case tensor_kind::input:
      return take_input(self, in.mb, in.value, in.x);
    case tensor_kind::grad:
      return take_grad(self, in.mb, in.value, in.x);
    case tensor_kind::eval:
      return take_eval(self, in.mb, in.value, in.x);
  }
  fail("{} tensor of unknown kind {}", where(self->state), int(in.kind));
}

// Chunk c > 0 of an interleaved device: the op its chunk 0 chose.
void take_chunk_command(stage_self self, const chunk_command& c) {
  auto& st = self->state;
  MERAK_CHECK(chunk(st) > 0 && st.cfg.tp_rank == 0 && c.op.chunk == chunk(st),
              "command for chunk {}", c.op.chunk);
  st.commanded.push_back(c.op);
  pump(self);
}

// Chunk 0 of an interleaved device: another chunk has an op's inputs.
void take_chunk_ready_message(stage_self self, const chunk_ready& r) {
  auto& st = self->state;
  if (!st.in_step) {  // a chunk's inputs, ahead of this step's message
    st.early_ready.push_back(r);
    return;
  }
  take_chunk_ready(self, r);
  pump(self);
}

// Chunk 0 of an interleaved device: the op it commanded is done.
void take_chunk_done(stage_self self, const chunk_done& d) {
  auto& st = self->state;
  MERAK_CHECK(st.awaiting_chunk, "{} finished while no chunk was commanded",
              partition::op_name(d.op));
  st.awaiting_chunk = false;
  st.sched->completed(d.op);
  pump(self);
}

stage_api::behavior_type stage_actor(stage_self self, stage_setup setup) {
  self->set_exception_handler(exception_reason);
  return {
      [=](stage_wiring& w) { take_wiring(self, setup, w); },
      [=](stage_plan& plan) { guarded(self, [&] { take_plan(self, plan); }); },
      [=](const step_start& m) {
        guarded(self, [&] {
          for (auto* link : {self->state.cfg.tp_link.get(), self->state.cfg.dp_link.get()})
            if (link) link->set_step(m.step);
          start_step(self);
        });
      },
      [=](stage_tensor& in) {  // by reference: take() can move
        guarded(self, [&] { take_tensor(self, in); });
      },
      [=](pump_next) { guarded(self, [&] { pump(self); }); },
      [=](tp_command& c) {
        guarded(self, [&] {
          self->state.commanded.push_back(c.op);
          pump(self);
        });
      },
      [=](chunk_command& c) { guarded(self, [&] { take_chunk_command(self, c); }); },
      [=](const chunk_ready& r) { guarded(self, [&] { take_chunk_ready_message(self, r); }); },
      [=](const chunk_done& d) { guarded(self, [&] { take_chunk_done(self, d); }); },
      [=](tied_gradient& g) { guarded(self, [&] { take_tied_gradient(self, g); }); },
      [=](bucket_reduced& r) { guarded(self, [&] { take_bucket_reduced(self, r); }); },
      [=](bucket_gathered& g) { guarded(self, [&] { take_bucket_gathered(self, g); }); },
      [=](const apply_update& u) { guarded(self, [&] { apply_step_update(self, u); }); },
      [=](const save_shard& m) { guarded(self, [&] { save_own_shard(self, m); }); },
      [=](const restore_shard& m) { guarded(self, [&] { restore_own_shard(self, m); }); },
  };
}

}  // namespace

stage_api spawn_stage(caf::actor_system& sys, stage_setup setup) {
  // Detached: a stage computes for milliseconds at a time on its own thread
  // (with its own OpenMP threads) and never blocks a scheduler worker.
  return sys.spawn<caf::detached>(stage_actor, std::move(setup));
}

}  // namespace merak::actors
