// parallel_trainer: starting a job's actors, its steps, its end (trainer_job.hpp).
#include "actors/trainer_job.hpp"

namespace merak::actors {

void parallel_options::validate(int batch) const {
  partition::layout::validate(batch);
  if (schedule == partition::schedule_kind::zb_h1 && recompute != recompute_mode::none)
    fail("--schedule zb-h1 runs without recomputation (got --recompute {})",
         recompute == recompute_mode::full ? "full" : "stage-aware");
  if (!(timeout_s > 0)) fail("the step timeout must be positive (got {})", timeout_s);
  if (!(heartbeat_s == 0 || (heartbeat_s >= 0.2 && heartbeat_s <= 1e6)))
    fail("--heartbeat-timeout must be 0 (off) or from 0.2 to 1e6 seconds (got {})", heartbeat_s);
  partition::validate_placement(actor_placement(processes ? processes->size() : 1));
}

partition::placement parallel_options::actor_placement(int world) const {
  if (!placement.empty())
    return partition::parse_placement(placement, dp, virtual_stages(), tp, world);
  auto devices = partition::default_placement(dp, pp, tp, world);
  return chunks > 1 ? partition::with_chunks(devices, chunks) : devices;
}

bool parallel_options::needs_actors() const {
  return processes || actors() * micro_batches > 1 || !trace_path.empty() ||
         recompute != recompute_mode::none || memory_budget > 0;
}

std::unique_ptr<model::training_job> make_training_job(model::train_options opts,
                                                       parallel_options par) {
  par.validate(opts.batch);  // before the layout decides which trainer
  if (par.needs_actors())
    return std::make_unique<parallel_trainer>(std::move(opts), std::move(par));
  return std::make_unique<model::trainer>(std::move(opts));
}

void parallel_trainer::impl::shutdown() {
  if (!self) return;
  // The other processes host their actors until process 0 is done with
  // them (its last validation and checkpoint); then every process ends its
  // own actors, waits until they are gone, and all close together.
  bool together = par.processes && !failed;
  if (together && lead()) {
    for (auto& f : followers) (*self)->send(f, job_finished{});
  } else if (together) {
    // However long process 0's last save takes: heartbeats, or its loss,
    // end the wait otherwise (without heartbeats, ten step timeouts).
    bool over = false;
    for (int waits = 0; !over;)
      (*self)->receive(
          [&](const job_finished&) { over = true; }, [&](caf::down_msg&) { over = true; },
          [&](const job_failed&) { over = true; },
          caf::after(timeout()) >> [&] { over = par.heartbeat_s <= 0 && ++waits >= 10; });
  }
  std::set<caf::actor_addr> ending;
  auto end = [&](const auto& a) {
    if (!a || a->node() != sys->node()) return;
    (*self)->send_exit(a, caf::exit_reason::user_shutdown);
    ending.insert(a.address());
  };
  auto await_ends = [&] {
    bool timed_out = false;
    while (!ending.empty() && !timed_out)
      (*self)->receive([&](caf::down_msg& dm) { ending.erase(dm.source); },
                       [](const job_failed&) {}, [](const job_finished&) {},
                       caf::after(std::chrono::seconds(5)) >> [&] { timed_out = true; });
  };
  for (auto& rep : stages)
    for (auto& st : rep)
      for (auto& a : st) end(a);
  for (auto& a : reducers) end(a);
  end(scheduler);
  await_ends();
  // Close the UCX transports while every peer is still here to answer
  // the closing flushes, then leave together. The watchdog answers
  // heartbeats until then.
  channel.reset();
  group_links.clear();
  if (together) {
    try {
      par.processes->barrier();
    } catch (const std::exception&) {
    }
  }
  end(watchdog);
  await_ends();
  self.reset();
}

void parallel_trainer::impl::mark_failed(const std::string& reason) {
  if (failed) return;
  failed = true;
  for (auto& t : group_links) t->cancel(reason);
  if (lead() && self)
    for (auto& f : followers) (*self)->send(f, job_failed{reason});
}

void parallel_trainer::impl::spawn() {
  if (!sys) {
    cfg = std::make_unique<caf::actor_system_config>();
    parallel_trainer::configure(*cfg);
    // Stages are detached threads; the reducers share one worker that
    // sleeps when idle (the work-stealing default polls, taking CPU from
    // the stages).
    cfg->set("scheduler.policy", caf::atom("sharing"));
    cfg->set("scheduler.max-threads", 1);
    cfg->set("logger.console", caf::atom("none"));
    own_sys = std::make_unique<caf::actor_system>(*cfg);
    sys = own_sys.get();
  } else if (par.processes && !sys->has_middleman()) {
    fail(
        "a job of several processes needs the actor system's network layer: configure it with "
        "parallel_trainer::configure");
  }
  self = std::make_unique<caf::scoped_actor>(*sys);
  // P counts virtual stages: an interleaved layout's pp x chunks actors per
  // line, virtual stage c x pp + d being chunk c of pipeline device d.
  const int P = par.virtual_stages(), D = par.dp, TP = par.tp;
  const int world = par.processes ? par.processes->size() : 1;
  me = par.processes ? par.processes->rank() : 0;
  place = par.actor_placement(world);
  partition::validate_placement(place);
  const std::vector<int> mine = place.actors_of(me);
  const model::graph& sg = shards[0].graph;  // every shard has the same structure
  const auto& sb = shard_bounds;
  // Cores: this process's, shared by its actors, and lent between the
  // stages of the host (core_pool.hpp).
  const int cores = par.threads > 0 ? par.threads : int(std::thread::hardware_concurrency());
  // A device's chunks (interleaved) take turns: each gets the device's share.
  std::set<std::array<int, 3>> devices_here;
  for (int i : mine) devices_here.insert({i / (P * TP), i / TP % P % par.pp, i % TP});
  const int per_actor = std::max(1, cores / int(devices_here.size()));
  lending lend = make_lending(mine, cores, per_actor);
  std::shared_ptr<core_pool> pool = lend.pool;
  cores_held = pool;
  // Who sends each stage its inputs, who reads its outputs, tied weights.
  routes = partition::route(sg, sb);
  const int64_t tokens = par.micro_batch_rows(opts.batch) * opts.model.max_seq;
  if (lead()) {
    scheduler_setup sch;
    sch.layout = par;
    sch.r0 = par.recompute_ratio;
    sch.budget = par.memory_budget;
    scheduler = spawn_scheduler(*sys, sch);
    names[scheduler.address()] = "scheduler actor";
    (*self)->monitor(scheduler);
  }
  // Communication groups, in the same order on every process (the UCX
  // ones are collectives): the replicas of each (stage, shard), then the
  // shards of each (replica, stage).
  std::vector<std::vector<std::vector<std::shared_ptr<comm::transport>>>> dp_link(
      D, std::vector<std::vector<std::shared_ptr<comm::transport>>>(
             P, std::vector<std::shared_ptr<comm::transport>>(TP)));
  auto tp_link = dp_link;
  // The group of `n` actors whose k-th is at coordinate member(k) = {d, s, t}.
  auto link_group = [&](int n, auto member, auto& links) {
    std::vector<int> ranks;
    for (int k = 0; k < n; ++k) {
      auto [d, s, t] = member(k);
      ranks.push_back(place.rank(d, s, t));
    }
    auto eps = group_endpoints(ranks);
    for (int k = 0; k < n; ++k) {
      auto [d, s, t] = member(k);
      links[d][s][t] = eps[size_t(k)];
    }
  };
  if (D > 1)
    for (int s = 0; s < P; ++s)
      for (int t = 0; t < TP; ++t)
        link_group(
            D,
            [&](int d) {
              return std::array<int, 3>{d, s, t};
            },
            dp_link);
  if (TP > 1)
    for (int d = 0; d < D; ++d)
      for (int s = 0; s < P; ++s)
        link_group(
            TP,
            [&](int t) {
              return std::array<int, 3>{d, s, t};
            },
            tp_link);
  if (par.processes) make_channel(lend, lend.host_processes() * (cores + 1));
  std::vector<std::vector<std::vector<reducer_api>>> reducer_of(
      D, std::vector<std::vector<reducer_api>>(P, std::vector<reducer_api>(TP)));
  stages.assign(D, std::vector<std::vector<stage_api>>(P, std::vector<stage_api>(TP)));
  process_view view;
  for (int i : mine) {
    const int r = i / (P * TP), s = i / TP % P, t = i % TP;
    if (D > 1) {
      reducer_setup rs;
      rs.link = dp_link[r][s][t];
      rs.sparse = par.sparse;
      rs.measure_error = par.measure_sparse_error && par.sparse.kind != comm::codec_kind::dense;
      rs.where = fmt::format("reducer actor (dp={}, pp={}, tp={})", r, s, t);
      auto a = spawn_reducer(*sys, rs);
      names[a.address()] = rs.where;
      (*self)->monitor(a);
      reducers.push_back(a);
      reducer_of[r][s][t] = a;
    }
    stage_setup su;
    su.dp_rank = r;
    su.dp = D;
    su.stage = s;
    su.pp = P;
    su.chunks = par.chunks;
    su.where = opts.where;
    if (par.spread_over_devices && opts.where.type != model::device::kind::cpu) {
      const int n = model::device_count(opts.where.type);
      MERAK_CHECK(n > 0, "no {} devices to spread the actors over", opts.where.str());
      su.where.index = int(view.actors.size()) % n;  // this process's k-th actor
    }
    su.tp_rank = t;
    su.tp = TP;
    su.tp_link = tp_link[r][s][t];
    su.tp_overlap = par.tp_overlap;
    su.graph = &shards[t].graph;
    su.first = sb[s];
    su.last = sb[s + 1];
    su.seed = opts.seed;
    su.adam.weight_decay = opts.weight_decay;
    su.policy.stage = s % par.pp;  // its device; the rest comes from the scheduler actor
    su.policy.stages = par.pp;
    su.policy.micro_batches = par.micro_batches;
    su.tokens_per_micro_batch = tokens;
    su.loss_scale = 1.0f / float(D * par.micro_batches);
    su.threads = per_actor;
    su.spin_us = par.idle_spin_us;
    // The host's: its other processes are taken to run as many as this one.
    su.busy_threads = lend.host_processes() * int(mine.size()) * per_actor;
    su.cores = pool;
    if (pool) su.core_index = lend.index_of.at(i);
    su.reports_memory = r == 0 && t == 0;  // one report per stage
    su.max_borrow = lend.cores - per_actor;
    su.trace = !par.trace_path.empty();
    su.bucket_bytes = par.bucket_bytes;
    if (par.sparse.kind != comm::codec_kind::dense) su.sparse_param = "wte";
    if (channel) {
      su.channel = channel;
      for (int q = 0; q < P; ++q) {
        const int rq = place.rank(r, q, t);
        su.line_rank.push_back(rq == me ? -1 : rq);
        su.line_index.push_back(place.index(r, q, t));
      }
    }
    su.route = routes[size_t(s)];
    auto a = spawn_stage(*sys, su);
    names[a.address()] = fmt::format("stage actor (dp={}, pp={}, tp={})", r, s, t);
    (*self)->monitor(a);
    stages[r][s][t] = a;
    {
      std::lock_guard lock(deliveries->mu);
      deliveries->to.resize(size_t(place.actors()));
      deliveries->to[size_t(i)] = a;
    }
    view.actors.push_back(a);
    view.reducers.push_back(reducer_of[r][s][t]);
  }
  if (par.processes) {
    view.home = caf::actor{*self};
    watchdog = spawn_watchdog(*sys, caf::actor_cast<failure_api>(*self));
    (*self)->monitor(watchdog);
    names[watchdog.address()] = "this process's watchdog";
    view.watchdog = watchdog;
    auto views = join_processes(*sys, *self, *par.processes, std::move(view),
                                par.listen_addr.empty() ? "127.0.0.1" : par.listen_addr, timeout(),
                                mesh_links);
    const auto limit = std::chrono::milliseconds(int64_t(par.heartbeat_s * 1000));
    const auto period = std::min(std::chrono::milliseconds(1000), limit / 4);
    if (!lead()) {
      coordinator = caf::actor_cast<coordinator_api>(views[0].home);
      names[coordinator.address()] =
          fmt::format("the coordinator (process 0 on {})", views[0].addr);
      (*self)->monitor(coordinator);
      if (par.heartbeat_s > 0)
        start_watchdog(*self, watchdog, {views[0].watchdog}, {names[coordinator.address()]}, period,
                       limit);
      return;  // process 0 wires and drives every actor
    }
    std::vector<watchdog_api> watched;
    std::vector<std::string> watched_names;
    for (int q = 1; q < world; ++q) {
      auto& v = views[size_t(q)];
      auto theirs = place.actors_of(q);
      MERAK_CHECK(v.actors.size() == theirs.size() && v.reducers.size() == theirs.size(),
                  "process {} hosts {} actors, its placement {}", q, v.actors.size(),
                  theirs.size());
      std::string hosted;
      for (size_t k = 0; k < theirs.size(); ++k) {
        const int i = theirs[k], r = i / (P * TP), s = i / TP % P, t = i % TP;
        if (k < 4) hosted += fmt::format("{}(dp={}, pp={}, tp={})", k ? ", " : "", r, s, t);
        stages[r][s][t] = v.actors[k];
        reducer_of[r][s][t] = v.reducers[k];
        names[v.actors[k].address()] = fmt::format(
            "stage actor (dp={}, pp={}, tp={}) of process {} on {}", r, s, t, q, v.addr);
        (*self)->monitor(v.actors[k]);
      }
      followers.push_back(caf::actor_cast<process_api>(v.home));
      names[v.home.address()] =
          fmt::format("process {} on {}, host of stage actor{} {}{}", q, v.addr,
                      theirs.size() > 1 ? "s" : "", hosted, theirs.size() > 4 ? ", ..." : "");
      (*self)->monitor(v.home);
      watched.push_back(v.watchdog);
      watched_names.push_back(names[v.home.address()]);
    }
    if (par.heartbeat_s > 0)
      start_watchdog(*self, watchdog, std::move(watched), std::move(watched_names), period, limit);
  }
  const auto me_coordinator = caf::actor_cast<coordinator_api>(*self);
  std::vector<stage_api> all;  // [dp x tp][pp], as the scheduler expects
  for (int r = 0; r < D; ++r)
    for (int t = 0; t < TP; ++t)
      for (int s = 0; s < P; ++s) all.push_back(stages[r][s][t]);
  for (int r = 0; r < D; ++r)
    for (int s = 0; s < P; ++s)
      for (int t = 0; t < TP; ++t) {
        std::vector<stage_api> line(P);  // this replica's stages of shard t
        for (int q = 0; q < P; ++q) line[q] = stages[r][q][t];
        (*self)->send(stages[r][s][t], stage_wiring{line, reducer_of[r][s][t], me_coordinator,
                                                    scheduler, stages[r][s]});
      }
  // Last: the scheduler sends plans only after its own wire message, so by
  // then every stage has its wire message queued ahead of the plan.
  (*self)->send(scheduler, scheduler_wiring{all, me_coordinator});
  // The scheduler answers once every stage reported its memory.
  bool planned = false;
  while (!planned)
    await("waiting for the scheduler's plan", [&](plan_ready& p) {
      plan_summary = std::move(p.summary);
      planned = true;
    });
}

model::step_result parallel_trainer::impl::follow_step() {
  model::step_result res;
  await(fmt::format("waiting for the coordinator's step {}", step + 1), [&](const step_done& d) {
    res = d.result;
    bubble = d.bubble;
    comm = d.comm;
  });
  step = res.step;
  return res;
}

model::step_result parallel_trainer::impl::train_step() {
  MERAK_CHECK(step < opts.steps, "train_step past --steps");
  if (!lead()) return follow_step();
  auto t0 = std::chrono::steady_clock::now();
  const double trace_t0 = trace_now();
  const int D = par.dp, P = par.virtual_stages(), M = par.micro_batches, TP = par.tp;
  for (auto& rep : stages)
    for (auto& st : rep)
      for (auto& a : st) (*self)->send(a, step_start{step});
  const int rows_per_mb = int(par.micro_batch_rows(opts.batch));
  const model::graph& sg = shards[0].graph;
  int tokens_v = sg.find_value("tokens"), targets_v = sg.find_value("targets");
  for (int r = 0; r < D; ++r)
    for (int mb = 0; mb < M; ++mb) {
      // This micro-batch's rows of the single-device run's global batch.
      model::batch b =
          corpus.train_batch(opts.seed, step, opts.batch, (r * M + mb) * rows_per_mb, rows_per_mb);
      for (int s = 0; s < P; ++s)
        for (int v : routes[size_t(s)].graph_inputs) {
          MERAK_CHECK(v == tokens_v || v == targets_v, "unknown graph input {}", v);
          const model::tensor& src = v == tokens_v ? b.tokens : b.targets;
          for (int t = 0; t < TP; ++t)
            (*self)->send(stages[r][s][t],
                          stage_tensor{kinput, mb, v, tensor_ref::make(src.clone())});
        }
    }
  double loss_sum = 0;
  int losses = 0, ready = 0;
  comm = {};
  std::vector<double> sumsq(P * TP, 0), busy(P, 0);
  // Trace tracks by name: every stage actor, its reducer and its TP sums.
  std::map<std::string, trace_track> traces;
  auto append = [](trace_track& to, trace_track& from) {
    to.insert(to.end(), std::make_move_iterator(from.begin()), std::make_move_iterator(from.end()));
  };
  while (losses < D * M || ready < D * P * TP) {
    await(
        fmt::format("waiting for losses ({}/{}) and gradients ({}/{}) of step {}", losses, D * M,
                    ready, D * P * TP, step + 1),
        [&](const micro_batch_loss& l) {
          loss_sum += l.loss;
          ++losses;
        },
        [&](const stage_ready& m) {
          const auto [r, s, t] = m.who;
          if (r == 0) {
            comm.dp_bytes_per_rank += m.dp_bytes;
            if (s == 0 && t == 0) {
              comm.sparse_union_rows = m.sparse_union_rows;
              comm.sparse_rel_error = m.sparse_rel_error;
            }
            sumsq[size_t(s * TP + t)] = m.grad_sumsq;  // shards: their slices, shard 0 the rest
            if (t == 0) busy[size_t(s)] = m.busy_s;
          }
          ++ready;
        },
        [&](stage_trace& m) {
          auto who = fmt::format("(dp={}, pp={}, tp={})", m.who.dp, m.who.stage, m.who.tp);
          append(traces["stage " + who], m.ops);
          if (!m.reductions.empty()) append(traces["reducer " + who], m.reductions);
          if (!m.tp_sums.empty()) append(traces["TP sums " + who], m.tp_sums);
        });
  }
  auto t_pipe = std::chrono::steady_clock::now();
  double pipe_s = std::chrono::duration<double>(t_pipe - t0).count();
  double busy_total = 0;
  for (double x : busy) busy_total += x;
  bubble = 1.0 - busy_total / (par.pp * pipe_s);  // a device's chunks share it
  double norm = 0;
  for (double x : sumsq) norm += x;
  norm = std::sqrt(norm);
  const float clip = model::clip_factor(norm, opts.grad_clip);
  float lr = schedule.at(step);
  const bool skip = model::skip_update(opts, loss_sum / double(D * M), norm);
  for (auto& rep : stages)
    for (auto& st : rep)
      for (auto& a : st) (*self)->send(a, apply_update{lr, clip, skip});
  for (int applied = 0; applied < D * P * TP;)
    await(fmt::format("waiting for optimizer steps ({}/{}) of step {}", applied, D * P * TP,
                      step + 1),
          [&](stage_applied& m) {
            if (!par.trace_path.empty())
              traces[fmt::format("stage (dp={}, pp={}, tp={})", m.who.dp, m.who.stage, m.who.tp)]
                  .push_back(std::move(m.adamw));
            ++applied;
          });
  if (!par.trace_path.empty()) write_trace(traces, trace_t0);
  ++step;
  model::step_result res;
  res.step = step;
  res.loss = loss_sum / double(D * M);
  res.lr = lr;
  res.grad_norm = norm;
  res.skipped = skip;
  res.step_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  res.tokens_per_s = double(opts.batch) * opts.model.max_seq / res.step_s;
  for (auto& f : followers) (*self)->send(f, step_done{res, bubble, comm});
  return res;
}

void parallel_trainer::impl::write_trace(const std::map<std::string, trace_track>& traces,
                                         double t0) {
  nlohmann::json events = nlohmann::json::array();
  int s = 0;
  for (auto& [track, slices] : traces) {
    ++s;
    events.push_back({{"name", "thread_name"},
                      {"ph", "M"},
                      {"pid", 0},
                      {"tid", s},
                      {"args", {{"name", track}}}});
    for (auto& x : slices)
      events.push_back({{"name", x.name},
                        {"ph", "X"},
                        {"pid", 0},
                        {"tid", s},
                        {"ts", (x.start - t0) * 1e6},
                        {"dur", (x.end - x.start) * 1e6}});
  }
  std::ofstream f(par.trace_path, std::ios::trunc);
  if (!f) fail("cannot write trace file '{}'", par.trace_path);
  f << nlohmann::json{{"traceEvents", events}}.dump() << '\n';
}

parallel_trainer::parallel_trainer(model::train_options opts, parallel_options par)
    : parallel_trainer(opts, par,
                       model::text_corpus(opts.data, opts.model.max_seq, opts.val_fraction,
                                          opts.tokens, opts.model.vocab)) {}

parallel_trainer::parallel_trainer(model::train_options opts, parallel_options par,
                                   model::text_corpus corpus)
    : impl_(std::make_unique<impl>(std::move(opts), std::move(par), std::move(corpus))) {}

parallel_trainer::parallel_trainer(model::train_options opts, parallel_options par,
                                   model::text_corpus corpus, caf::actor_system& system)
    : impl_(std::make_unique<impl>(std::move(opts), std::move(par), std::move(corpus), &system)) {}

void parallel_trainer::configure(caf::actor_system_config& cfg) {
  add_message_types(cfg);
  cfg.load<caf::io::middleman>();
}

parallel_trainer::~parallel_trainer() = default;

const model::train_options& parallel_trainer::options() const {
  return impl_->opts;
}
model::step_result parallel_trainer::train_step() {
  return impl_->guarded([&] { return impl_->train_step(); });
}
std::string parallel_trainer::save() {
  return impl_->guarded([&] { return impl_->save(); });
}
bool parallel_trainer::writes_outputs() const {
  return impl_->lead();
}
std::vector<std::pair<std::string, double>> parallel_trainer::step_metrics() const {
  auto& par = impl_->par;
  std::vector<std::pair<std::string, double>> m{{"bubble", impl_->bubble}};
  if (par.dp > 1) m.emplace_back("dp_bytes_per_rank", double(impl_->comm.dp_bytes_per_rank));
  if (par.sparse.kind != comm::codec_kind::dense)
    m.emplace_back("sparse_union_rows", double(impl_->comm.sparse_union_rows));
  if (par.measure_sparse_error) m.emplace_back("sparse_rel_error", impl_->comm.sparse_rel_error);
  return m;
}
std::string parallel_trainer::describe() const {
  auto& par = impl_->par;
  return fmt::format(
      "model {} on dp={} tp={} pp={}{} (stages at nodes {}), {} micro-batches, schedule {}, "
      "tp-overlap {}{}\nrecomputation: {}",
      impl_->opts.model.str(), par.dp, par.tp, par.pp,
      par.chunks > 1 ? fmt::format(" x {} chunks", par.chunks) : "", fmt::join(impl_->bounds, ","),
      par.micro_batches, partition::schedule_name(par.schedule), par.tp_overlap,
      impl_->place.world > 1
          ? fmt::format(", {} processes (placement {}{})", impl_->place.world, impl_->place.str(),
                        par.processes && par.processes->credentials().tls
                            ? "; actor and bootstrap connections under TLS"
                            : "")
          : "",
      impl_->plan_summary);
}
double parallel_trainer::last_bubble_fraction() const {
  return impl_->bubble;
}
parallel_trainer::comm_stats parallel_trainer::last_comm() const {
  return impl_->comm;
}
double parallel_trainer::validation_loss() {
  return impl_->guarded([&] { return impl_->validation_loss(); });
}
int64_t parallel_trainer::step() const {
  return impl_->step;
}
const std::vector<int>& parallel_trainer::stage_bounds() const {
  return impl_->bounds;
}
std::string parallel_trainer::recompute_plan() const {
  return impl_->plan_summary;
}
std::string parallel_trainer::placement() const {
  return impl_->place.str();
}

}  // namespace merak::actors
