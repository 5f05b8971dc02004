// The coordinator: starting a job's actors, its steps, its end (coordinator.hpp).
#include "actors/coordinator.hpp"

#include <new>
#include <system_error>

#include "core/files.hpp"

namespace merak::actors {

coordinator::coordinator(model::train_options o, parallel_options p,
                         std::shared_ptr<const model::token_source> c, caf::actor_system* lent)
    : coordinator_state{std::move(o), std::move(p), std::move(c)} {
  sys = lent;
  opts.validate();
  par.validate(opts.batch);
  model::check_corpus_vocab(*corpus, opts.model);
  graph = model::build_model(opts.model);
  if (par.sparse.kind != comm::codec_kind::dense) {
    bool has_wte = false;
    for (auto& n : graph.nodes())
      for (auto& spec : n.params) has_wte = has_wte || spec.name == "wte";
    if (!has_wte)
      fail(
          "--sparse-reducer {} compresses the token embedding \"wte\", which this model "
          "does not have (layers::embedding makes it)",
          comm::codec_kind_name(par.sparse.kind));
  }
  const int stages = par.virtual_stages();
  if (par.stage_bounds.empty()) {
    bounds = partition::balanced_stages(graph, stages);
  } else {
    const auto& given = par.stage_bounds;
    const int n = int(graph.nodes().size());
    bool ok = int(given.size()) == stages + 1 && given.front() == 0 && given.back() == n;
    for (size_t s = 1; ok && s < given.size(); ++s) ok = given[s - 1] < given[s];
    if (!ok)
      fail("stage bounds [{}] do not split the model's {} nodes into {} stages{}",
           fmt::join(given, ", "), n, stages,
           par.chunks > 1 ? fmt::format(" (--pp {} x --chunks {})", par.pp, par.chunks)
                          : fmt::format(" (--pp {})", par.pp));
    bounds = given;
  }
  if (par.sequence_parallel && opts.model.max_seq % par.tp != 0)
    fail("--sequence-parallel splits each sequence's {} tokens over --tp {}: it must divide them",
         opts.model.max_seq, par.tp);
  for (int t = 0; t < par.tp; ++t)
    shards.push_back(partition::rewrite_for_tp(graph, par.tp, t, par.sequence_parallel));
  for (int b : bounds) shard_bounds.push_back(shards[0].node_map[b]);
  if (partition::shards_gradients(par.sharding))
    for (auto& n : shards[0].graph.nodes())
      for (auto& spec : n.params)
        if (spec.shard.copies() > 1)
          fail(
              "--data-parallel-sharding-strategy {} with --tp {}: '{}' is replicated "
              "over {} TP shards (fewer key/value heads than shards), whose partial gradients "
              "are summed whole; use optim, or a --tp that divides the key/value heads",
              partition::sharding_strategy_name(par.sharding), par.tp, spec.name,
              spec.shard.copies());
  schedule = opts.schedule();
  try {
    spawn();
    if (!opts.load.empty()) load();
  } catch (const std::exception& e) {
    mark_failed(e.what());
    shutdown();
    const bool resources = dynamic_cast<const std::system_error*>(&e) != nullptr ||
                           dynamic_cast<const std::bad_alloc*>(&e) != nullptr;
    if (!resources) throw;
    // An actor whose thread could not start stays counted as running: the
    // actor system would wait for it forever when destroyed, so it is left
    // to the end of the process.
    (void)own_sys.release();
    fail(
        "cannot start the job's actors: {} (this process's limits on threads, ulimit -u, or on "
        "address space, ulimit -v, are too low for --dp {} x --pp {} x --tp {}: give it more, or "
        "fewer actors)",
        e.what(), par.dp, par.virtual_stages(), par.tp);
  }
}

model::step_result coordinator::train_step() {
  return guarded([&] { return run_step(); });
}

std::string coordinator::save() {
  return guarded([&] { return write_checkpoint(); });
}

double coordinator::validation_loss() {
  return guarded([&] { return run_validation(); });
}

void coordinator::shutdown() {
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

void coordinator::mark_failed(const std::string& reason) {
  if (failed) return;
  failed = true;
  for (auto& t : group_links) t->cancel(reason);
  if (lead() && self)
    for (auto& f : followers) (*self)->send(f, job_failed{reason});
}

void coordinator::start_actor_system() {
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
}

void coordinator::spawn() {
  start_actor_system();
  const int world = par.processes ? par.processes->size() : 1;
  me = par.processes ? par.processes->rank() : 0;
  place = par.actor_placement(world);
  partition::validate_placement(place);
  const std::vector<int> mine = place.actors_of(me);
  // Cores: this process's, shared by its actors, and lent between the
  // stages of the host (core_pool.hpp). A device's chunks (interleaved)
  // take turns: each gets the device's share.
  // Without --threads, the processes of a host split its cores.
  lending found = find_host();
  const int cores =
      par.threads > 0
          ? par.threads
          : std::max(1, int(std::thread::hardware_concurrency()) / found.host_processes());
  std::set<std::array<int, 3>> devices_here;
  for (int i : mine) {
    const partition::actor_coordinate at = place.coordinate(i);
    devices_here.insert({at.replica, at.stage % par.pp, at.shard});
  }
  const int per_actor = std::max(1, cores / int(devices_here.size()));
  const lending host = make_lending(std::move(found), mine, cores, per_actor);
  cores_held = host.pool;
  // Who sends each stage its inputs, who reads its outputs, tied weights
  // (every shard has the same structure).
  routes = partition::route(shards[0].graph, shard_bounds);
  if (lead()) {
    scheduler_setup setup;
    setup.layout = par;
    setup.r0 = par.recompute_ratio;
    setup.budget = par.memory_budget;
    scheduler = spawn_scheduler(*sys, setup);
    names[scheduler.address()] = "scheduler actor";
    (*self)->monitor(scheduler);
  }
  const group_grid groups = link_groups();
  if (par.processes) make_channel(host, host.host_processes() * (cores + 1));
  layout_grid<reducer_api> reducer_of = empty_grid<reducer_api>(par);
  stages = empty_grid<stage_api>(par);
  process_view view = spawn_local_actors(mine, groups, host, per_actor, reducer_of);
  if (par.processes) join_other_processes(std::move(view), reducer_of);
  if (lead()) wire(reducer_of);  // process 0 wires and drives every actor
}

coordinator::group_grid coordinator::link_groups() {
  const int replicas = par.dp, virtual_stages = par.virtual_stages(), shards_per_stage = par.tp;
  group_grid groups;
  groups.replicas = empty_grid<std::shared_ptr<comm::transport>>(par);
  groups.shards = groups.replicas;
  // The group of `n` actors whose k-th is member(k).
  auto link_group = [&](int n, auto member, auto& links) {
    std::vector<int> ranks;
    for (int k = 0; k < n; ++k) ranks.push_back(place.rank_of[size_t(place.index(member(k)))]);
    auto endpoints = group_endpoints(ranks);
    for (int k = 0; k < n; ++k) {
      const partition::actor_coordinate at = member(k);
      links[at.replica][at.stage][at.shard] = endpoints[size_t(k)];
    }
  };
  if (replicas > 1)
    for (int s = 0; s < virtual_stages; ++s)
      for (int t = 0; t < shards_per_stage; ++t)
        link_group(
            replicas,
            [&](int d) {
              return partition::actor_coordinate{d, s, t};
            },
            groups.replicas);
  if (shards_per_stage > 1)
    for (int d = 0; d < replicas; ++d)
      for (int s = 0; s < virtual_stages; ++s)
        link_group(
            shards_per_stage,
            [&](int t) {
              return partition::actor_coordinate{d, s, t};
            },
            groups.shards);
  return groups;
}

stage_setup coordinator::stage_setup_of(const partition::actor_coordinate& at, int index,
                                        const group_grid& groups, const lending& host,
                                        int per_actor, int local_actors, int local_index) {
  const int r = at.replica, s = at.stage, t = at.shard;
  stage_setup su;
  su.dp_rank = r;
  su.dp = par.dp;
  su.stage = s;
  su.pp = par.virtual_stages();
  su.chunks = par.chunks;
  su.where = opts.where;
  if (par.spread_over_devices && opts.where.type != model::device::kind::cpu) {
    const int n = model::device_count(opts.where.type);
    MERAK_CHECK(n > 0, "no {} devices to spread the actors over", opts.where.str());
    su.where.index = local_index % n;  // this process's k-th actor
  }
  su.tp_rank = t;
  su.tp = par.tp;
  su.tp_link = groups.shards[r][s][t];
  if (par.dp > 1) su.dp_link = groups.replicas[r][s][t];
  su.tp_overlap = par.tp_overlap;
  su.graph = &shards[t].graph;
  su.first = shard_bounds[s];
  su.last = shard_bounds[s + 1];
  su.seed = opts.seed;
  su.adam = opts.adam();
  su.policy.stage = s % par.pp;  // its device; the rest comes from the scheduler actor
  su.policy.stages = par.pp;
  su.policy.micro_batches = par.micro_batches;
  // Known before the plan: the gradient buckets' order depends on it.
  su.policy.split_weight = par.schedule == partition::schedule_kind::zb_h1;
  su.tokens_per_micro_batch = par.micro_batch_rows(opts.batch) * opts.model.max_seq;
  su.loss_scale = 1.0f / float(par.dp * par.micro_batches);
  su.threads = per_actor;
  su.spin_us = par.idle_spin_us;
  // The host's: its other processes are taken to run as many as this one.
  su.busy_threads = host.host_processes() * local_actors * per_actor;
  su.cores = host.pool;
  if (host.pool) su.core_index = host.index_of.at(index);
  su.reports_memory = r == 0 && t == 0;  // one report per stage
  su.max_borrow = host.cores - per_actor;
  su.trace = !par.trace_path.empty();
  su.bucket_bytes = par.bucket_bytes;
  if (par.sparse.kind != comm::codec_kind::dense) su.sparse_param = "wte";
  su.distributed_optimizer = par.sharding != partition::sharding_strategy::no_shard;
  su.shard_parameters = partition::shards_parameters(par.sharding);
  su.recompute_attention = par.recompute == partition::recompute_kind::selective;
  su.recompute_layers = par.recompute_layers;
  if (channel) {
    su.channel = channel;
    for (int q = 0; q < su.pp; ++q) {
      const int rank_q = place.rank(r, q, t);
      su.line_rank.push_back(rank_q == me ? -1 : rank_q);
      su.line_index.push_back(place.index(r, q, t));
    }
  }
  su.route = routes[size_t(s)];
  return su;
}

process_view coordinator::spawn_local_actors(const std::vector<int>& mine, const group_grid& groups,
                                             const lending& host, int per_actor,
                                             layout_grid<reducer_api>& reducer_of) {
  process_view view;
  for (int i : mine) {
    const partition::actor_coordinate at = place.coordinate(i);
    const int r = at.replica, s = at.stage, t = at.shard;
    std::shared_ptr<count_progress> reductions, fetched;
    if (par.dp > 1 && partition::shards_gradients(par.sharding))
      reductions = std::make_shared<count_progress>();
    if (par.dp > 1 && par.sharding != partition::sharding_strategy::no_shard &&
        (par.overlap_param_gather || partition::shards_parameters(par.sharding)))
      fetched = std::make_shared<count_progress>("all-gather of parameter values");
    if (par.dp > 1) {
      reducer_setup rs;
      rs.reduced = reductions;
      rs.fetched = fetched;
      rs.link = groups.replicas[r][s][t];
      rs.sparse = par.sparse;
      rs.measure_error = par.measure_sparse_error && par.sparse.kind != comm::codec_kind::dense;
      rs.where = fmt::format("reducer actor ({})", at.str());
      auto reducer = spawn_reducer(*sys, rs);
      names[reducer.address()] = rs.where;
      (*self)->monitor(reducer);
      reducers.push_back(reducer);
      reducer_of[r][s][t] = reducer;
    }
    auto setup = stage_setup_of(at, i, groups, host, per_actor, int(mine.size()),
                                int(view.actors.size()));
    setup.reductions = std::move(reductions);
    setup.fetched = std::move(fetched);
    auto stage = spawn_stage(*sys, std::move(setup));
    names[stage.address()] = fmt::format("stage actor ({})", at.str());
    (*self)->monitor(stage);
    stages[r][s][t] = stage;
    {
      std::lock_guard lock(deliveries->mu);
      deliveries->to.resize(size_t(place.actors()));
      deliveries->to[size_t(i)] = stage;
    }
    view.actors.push_back(stage);
    view.reducers.push_back(reducer_of[r][s][t]);
  }
  return view;
}

void coordinator::join_other_processes(process_view mine, layout_grid<reducer_api>& reducer_of) {
  mine.home = caf::actor{*self};
  watchdog = spawn_watchdog(*sys, caf::actor_cast<failure_api>(*self));
  (*self)->monitor(watchdog);
  names[watchdog.address()] = "this process's watchdog";
  mine.watchdog = watchdog;
  auto views = join_processes(*sys, *self, *par.processes, std::move(mine),
                              par.listen_addr.empty() ? "127.0.0.1" : par.listen_addr, timeout(),
                              mesh_links);
  const auto limit = std::chrono::milliseconds(int64_t(par.heartbeat_s * 1000));
  const auto period = std::min(std::chrono::milliseconds(1000), limit / 4);
  if (!lead()) {
    lead_coordinator = caf::actor_cast<coordinator_api>(views[0].home);
    names[lead_coordinator.address()] =
        fmt::format("the coordinator (process 0 on {})", views[0].addr);
    (*self)->monitor(lead_coordinator);
    if (par.heartbeat_s > 0)
      start_watchdog(*self, watchdog, {views[0].watchdog}, {names[lead_coordinator.address()]},
                     period, limit);
    return;
  }
  std::vector<watchdog_api> watched;
  std::vector<std::string> watched_names;
  for (int q = 1; q < int(views.size()); ++q) {
    auto& v = views[size_t(q)];
    auto theirs = place.actors_of(q);
    MERAK_CHECK(v.actors.size() == theirs.size() && v.reducers.size() == theirs.size(),
                "process {} hosts {} actors, its placement {}", q, v.actors.size(), theirs.size());
    std::string hosted;
    for (size_t k = 0; k < theirs.size(); ++k) {
      const partition::actor_coordinate at = place.coordinate(theirs[k]);
      if (k < 4) hosted += fmt::format("{}({})", k ? ", " : "", at.str());
      stages[at.replica][at.stage][at.shard] = v.actors[k];
      reducer_of[at.replica][at.stage][at.shard] = v.reducers[k];
      names[v.actors[k].address()] =
          fmt::format("stage actor ({}) of process {} on {}", at.str(), q, v.addr);
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

void coordinator::wire(const layout_grid<reducer_api>& reducer_of) {
  const int replicas = par.dp, virtual_stages = par.virtual_stages(), shards_per_stage = par.tp;
  const auto me_coordinator = caf::actor_cast<coordinator_api>(*self);
  std::vector<stage_api> all;  // [dp x tp][pp], as the scheduler expects
  for (int r = 0; r < replicas; ++r)
    for (int t = 0; t < shards_per_stage; ++t)
      for (int s = 0; s < virtual_stages; ++s) all.push_back(stages[r][s][t]);
  for (int r = 0; r < replicas; ++r)
    for (int s = 0; s < virtual_stages; ++s)
      for (int t = 0; t < shards_per_stage; ++t) {
        std::vector<stage_api> stage_line(virtual_stages);  // this replica's stages of shard t
        for (int q = 0; q < virtual_stages; ++q) stage_line[q] = stages[r][q][t];
        (*self)->send(stages[r][s][t], stage_wiring{stage_line, reducer_of[r][s][t], me_coordinator,
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

model::step_result coordinator::follow_step() {
  model::step_result res;
  await(fmt::format("waiting for the coordinator's step {}", step + 1), [&](const step_done& d) {
    res = d.result;
    bubble = d.bubble;
    comm = d.comm;
    memory = d.memory;
  });
  step = res.step;
  return res;
}

void coordinator::start_step() {
  for (auto& rep : stages)
    for (auto& st : rep)
      for (auto& a : st) (*self)->send(a, step_start{step});
  const int micro_batches = par.micro_batches;
  const int rows_per_mb = int(par.micro_batch_rows(opts.batch));
  const model::graph& shard_graph = shards[0].graph;
  int tokens_v = shard_graph.find_value("tokens"), targets_v = shard_graph.find_value("targets");
  for (int r = 0; r < par.dp; ++r)
    for (int mb = 0; mb < micro_batches; ++mb) {
      // This micro-batch's rows of the single-device run's global batch.
      model::batch b = corpus->train_batch(opts.seed, step, opts.batch,
                                           (r * micro_batches + mb) * rows_per_mb, rows_per_mb);
      for (int s = 0; s < par.virtual_stages(); ++s)
        for (int v : routes[size_t(s)].graph_inputs) {
          MERAK_CHECK(v == tokens_v || v == targets_v, "unknown graph input {}", v);
          const model::tensor& src = v == tokens_v ? b.tokens : b.targets;
          for (int t = 0; t < par.tp; ++t)
            (*self)->send(stages[r][s][t],
                          stage_tensor{tensor_kind::input, mb, v, tensor_ref::make(src.clone())});
        }
    }
}

void coordinator::apply_step(const apply_update& update,
                             std::map<std::string, trace_track>& traces) {
  for (auto& rep : stages)
    for (auto& st : rep)
      for (auto& a : st) (*self)->send(a, update);
  const int actors = par.dp * par.virtual_stages() * par.tp;
  for (int applied = 0; applied < actors;)
    await(fmt::format("waiting for optimizer steps ({}/{}) of step {}", applied, actors, step + 1),
          [&](stage_applied& m) {
            if (!par.trace_path.empty())
              traces[fmt::format("stage (dp={}, pp={}, tp={})", m.who.dp, m.who.stage, m.who.tp)]
                  .push_back(std::move(m.adamw));
            ++applied;
          });
}

model::step_result coordinator::run_step() {
  MERAK_CHECK(step < opts.steps, "train_step past --steps");
  if (!lead()) return follow_step();
  auto t0 = std::chrono::steady_clock::now();
  const double trace_t0 = trace_now();
  const int replicas = par.dp, virtual_stages = par.virtual_stages(),
            micro_batches = par.micro_batches, shards_per_stage = par.tp;
  start_step();
  double loss_sum = 0;
  int losses = 0, ready = 0;
  comm = {};
  memory = {};
  // By (replica, pipeline device, shard): an interleaved device holds its
  // chunks' stage actors, whose bytes add up (their peaks taken as one).
  std::vector<memory_use> per_device(size_t(replicas * par.pp * shards_per_stage));
  // Gradient shares by (stage, shard); by (replica, stage, shard) when the
  // distributed optimizer leaves each replica a slice of the gradients.
  const bool sharded = par.sharding != partition::sharding_strategy::no_shard && replicas > 1;
  std::vector<double> sumsq((sharded ? replicas : 1) * virtual_stages * shards_per_stage, 0),
      busy(virtual_stages, 0);
  // Trace tracks by name: every stage actor, its reducer and its shards_per_stage sums.
  std::map<std::string, trace_track> traces;
  auto append = [](trace_track& to, trace_track& from) {
    to.insert(to.end(), std::make_move_iterator(from.begin()), std::make_move_iterator(from.end()));
  };
  while (losses < replicas * micro_batches ||
         ready < replicas * virtual_stages * shards_per_stage) {
    await(
        fmt::format("waiting for losses ({}/{}) and gradients ({}/{}) of step {}", losses,
                    replicas * micro_batches, ready, replicas * virtual_stages * shards_per_stage,
                    step + 1),
        [&](const micro_batch_loss& l) {
          loss_sum += l.loss;
          ++losses;
        },
        [&](const stage_ready& m) {
          const auto [r, s, t] = m.who;
          per_device[size_t((r * par.pp + s % par.pp) * shards_per_stage + t)] += m.memory;
          if (sharded)  // shards: their slices, shard 0 the rest; replicas: theirs
            sumsq[size_t((r * virtual_stages + s) * shards_per_stage + t)] = m.grad_sumsq;
          if (r == 0) {
            comm.dp_bytes_per_rank += m.dp_bytes;
            if (s == 0 && t == 0) {
              comm.sparse_union_rows = m.sparse_union_rows;
              comm.sparse_rel_error = m.sparse_rel_error;
            }
            if (!sharded) sumsq[size_t(s * shards_per_stage + t)] = m.grad_sumsq;
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
  for (const auto& dev : per_device) memory.keep_largest(dev);
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
  const bool skip = model::skip_update(opts, loss_sum / double(replicas * micro_batches), norm);
  apply_step(apply_update{lr, clip, skip}, traces);
  if (!par.trace_path.empty()) write_trace(traces, trace_t0);
  ++step;
  model::step_result res;
  res.step = step;
  res.loss = loss_sum / double(replicas * micro_batches);
  res.lr = lr;
  res.grad_norm = norm;
  res.skipped = skip;
  res.step_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  res.tokens_per_s = double(opts.batch) * opts.model.max_seq / res.step_s;
  for (auto& f : followers) (*self)->send(f, step_done{res, bubble, comm, memory});
  return res;
}

void coordinator::write_trace(const std::map<std::string, trace_track>& traces, double t0) {
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
  write_file_atomic(par.trace_path, nlohmann::json{{"traceEvents", events}}.dump() + '\n');
}

}  // namespace merak::actors
