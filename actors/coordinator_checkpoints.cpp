// parallel_trainer: sharded checkpoints and validation on the stage actors
// (coordinator.hpp).
#include "actors/coordinator.hpp"

namespace merak::actors {

void coordinator::load() {
  if (!lead()) {
    await("waiting for the coordinator to load the checkpoint",
          [&](const resume_at& r) { step = r.step; });
    return;
  }
  if (model::starts_without_checkpoint(opts)) {
    step = 0;
    for (auto& f : followers) (*self)->send(f, resume_at{step});
    return;
  }
  model::checkpoint_reader ckpt(opts.load);
  step = model::check_resume(opts, ckpt.metadata(), ckpt.dir(), corpus ? corpus->name() : "");
  int expected = 0;
  for (auto& rep : stages)
    for (auto& st : rep)
      for (auto& a : st) {
        (*self)->send(a, restore_shard{ckpt.dir()});
        ++expected;
      }
  for (int got = 0; got < expected; ++got)
    await(fmt::format("loading checkpoint {} ({}/{} stage actors)", ckpt.dir(), got, expected),
          [&](const shard_restored&) {});
  spdlog::info("resumed from '{}' at step {}", ckpt.dir(), step);
  for (auto& f : followers) (*self)->send(f, resume_at{step});
}

std::string coordinator::write_checkpoint() {
  if (opts.save_dir.empty()) fail("no --save directory given");
  if (!lead()) fail("only process 0 of a job writes checkpoints");
  const std::string tmp = model::begin_checkpoint(opts.save_dir, step);
  // A save that fails leaves no step_*.tmp behind (a killed one is swept
  // by the next save).
  try {
    // Every shard carries the index's metadata (each adds its own AdamW
    // count), so that a reader can tell a shard of another step or run.
    auto meta = model::checkpoint_metadata(opts, step, corpus->name());
    meta["merak.step"] = std::to_string(step);
    std::vector<model::shard_record> records;
    int64_t adam_t = -1;
    int expected = 0;
    // Replica 0 writes; under the distributed optimizer every replica takes
    // part (replica 0 gathers the moments' slices from the others).
    const bool sharded = par.sharding != partition::sharding_strategy::no_shard && par.dp > 1;
    for (size_t r = 0; r < (sharded ? stages.size() : 1); ++r)
      for (auto& st : stages[r])
        for (auto& a : st) {
          (*self)->send(a, save_shard{tmp, meta});
          ++expected;
        }
    for (int got = 0; got < expected; ++got)
      await(fmt::format("writing checkpoint shards ({}/{}) of step {}", got, expected, step),
            [&](shard_saved& s) {
              records.insert(records.end(), s.records.begin(), s.records.end());
              adam_t = s.adam_t;
            });
    meta["merak.adam_t"] = std::to_string(adam_t);
    return model::commit_sharded_checkpoint(
        opts.save_dir, step, records, meta,
        fmt::format("dp={} pp={}{} tp={} processes={} placement={}", par.dp, par.pp,
                    par.chunks > 1 ? fmt::format(" chunks={}", par.chunks) : "", par.tp,
                    place.world, place.str()));
  } catch (...) {
    model::discard_checkpoint(tmp);
    throw;
  }
}

double coordinator::run_validation() {
  if (!lead()) {
    double loss = 0;
    await("waiting for the coordinator's validation loss",
          [&](const validation_done& v) { loss = v.loss; });
    return loss;
  }
  // Forward only, on the stage actors of replica 0: nothing is gathered.
  // Under parameter shards every replica runs it (a node's all-gather needs
  // them all) and replica 0 reports.
  const int replicas = partition::shards_parameters(par.sharding) ? par.dp : 1;
  const int64_t nb = std::min<int64_t>(opts.eval_batches, corpus->val_batches(opts.batch));
  const model::graph& shard_graph = shards[0].graph;
  const int tokens_v = shard_graph.find_value("tokens"),
            targets_v = shard_graph.find_value("targets");
  for (int64_t i = 0; i < nb; ++i) {
    model::batch vb = corpus->val_batch(i, opts.batch);
    for (int s = 0; s < par.virtual_stages(); ++s)
      for (int v : routes[size_t(s)].graph_inputs) {
        MERAK_CHECK(v == tokens_v || v == targets_v, "unknown graph input {}", v);
        const model::tensor& src = v == tokens_v ? vb.tokens : vb.targets;
        for (int r = 0; r < replicas; ++r)
          for (int t = 0; t < par.tp; ++t)
            (*self)->send(stages[size_t(r)][s][t],
                          stage_tensor{tensor_kind::eval, int(eval_seq + i), v,
                                       tensor_ref::make(src.clone())});
      }
  }
  double sum = 0;
  for (int64_t got = 0; got < nb; ++got)
    await(fmt::format("validation forwards ({}/{})", got, nb),
          [&](const eval_loss& e) { sum += e.loss; });
  eval_seq += nb;
  for (auto& f : followers) (*self)->send(f, validation_done{sum / double(nb)});
  return sum / double(nb);
}

}  // namespace merak::actors
