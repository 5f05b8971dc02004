// parallel_trainer: sharded checkpoints and validation (trainer_job.hpp).
#include "actors/trainer_job.hpp"

namespace merak::actors {

void parallel_trainer::impl::ensure_full_copy() {
  if (eval_exec) return;
  eval_store = std::make_unique<model::parameter_store>(opts.seed);
  eval_exec = std::make_unique<model::executor>(graph, *eval_store);
}

void parallel_trainer::impl::gather_full() {
  ensure_full_copy();
  std::map<std::string, int> index;
  for (size_t i = 0; i < eval_store->all().size(); ++i)
    index[eval_store->all()[i]->spec.name] = int(i);
  for (int s = 0; s < par.pp; ++s)
    for (int t = 0; t < par.tp; ++t) {
      std::map<std::string, model::shard_spec> split;
      for (auto& n : shards[t].graph.nodes())
        for (auto& spec : n.params)
          if (spec.shard.sharded()) split[spec.name] = spec.shard;
      (*self)->send(stages[0][s][t], gather_atom::value);
      await(fmt::format("gathering the parameters of stage {} shard {} for validation", s, t),
            [&](gathered_atom, std::vector<std::string>& names_, std::vector<tensor_ref>& values) {
              for (size_t i = 0; i < names_.size(); ++i) {
                auto it = index.find(names_[i]);
                MERAK_CHECK(it != index.end(), "gathered unknown parameter {}", names_[i]);
                auto& whole = eval_store->all()[it->second]->value;
                if (auto sp = split.find(names_[i]); sp != split.end())
                  model::place_shard(whole, *values[i].t, sp->second);
                else if (t == 0)
                  std::memcpy(whole.raw(), values[i].t->raw(), whole.bytes());
              }
            });
    }
}

void parallel_trainer::impl::load() {
  if (!lead()) {
    await("waiting for the coordinator to load the checkpoint",
          [&](step_atom, int64_t resumed) { step = resumed; });
    return;
  }
  model::checkpoint_reader ckpt(opts.load);
  step = model::check_resume(opts, ckpt.metadata(), ckpt.dir());
  int expected = 0;
  for (auto& rep : stages)
    for (auto& st : rep)
      for (auto& a : st) {
        (*self)->send(a, restore_atom::value, ckpt.dir());
        ++expected;
      }
  for (int got = 0; got < expected; ++got)
    await(fmt::format("loading checkpoint {} ({}/{} stage actors)", ckpt.dir(), got, expected),
          [&](restored_atom, int, int, int) {});
  spdlog::info("resumed from '{}' at step {}", ckpt.dir(), step);
  for (auto& f : followers) (*self)->send(f, step_atom::value, step);
}

std::string parallel_trainer::impl::save() {
  if (opts.save_dir.empty()) fail("no --save directory given");
  if (!lead()) fail("only process 0 of a job writes checkpoints");
  const std::string tmp = model::begin_checkpoint(opts.save_dir, step);
  auto meta = model::checkpoint_metadata(opts, step, corpus.name());
  std::vector<model::shard_record> records;
  int64_t adam_t = -1;
  int expected = 0;
  for (auto& st : stages[0])
    for (auto& a : st) {
      (*self)->send(a, save_atom::value, tmp, meta);
      ++expected;
    }
  for (int got = 0; got < expected; ++got)
    await(fmt::format("writing checkpoint shards ({}/{}) of step {}", got, expected, step),
          [&](saved_atom, int, int, int, std::vector<model::shard_record>& mine, int64_t t) {
            records.insert(records.end(), mine.begin(), mine.end());
            adam_t = t;
          });
  meta["merak.step"] = std::to_string(step);
  meta["merak.adam_t"] = std::to_string(adam_t);
  return model::commit_sharded_checkpoint(
      opts.save_dir, step, records, meta,
      fmt::format("dp={} pp={} tp={} processes={} placement={}", par.dp, par.pp, par.tp,
                  place.world, place.str()));
}

double parallel_trainer::impl::validation_loss() {
  if (!lead()) {
    double loss = 0;
    await("waiting for the coordinator's validation loss",
          [&](validated_atom, double x) { loss = x; });
    return loss;
  }
  gather_full();
  int64_t nb = std::min<int64_t>(opts.eval_batches, corpus.val_batches(opts.batch));
  double sum = 0;
  for (int64_t i = 0; i < nb; ++i) {
    model::batch vb = corpus.val_batch(i, opts.batch);
    std::vector<model::tensor> in;
    in.push_back(std::move(vb.tokens));
    in.push_back(std::move(vb.targets));
    sum += eval_exec->evaluate(std::move(in));
  }
  for (auto& f : followers) (*self)->send(f, validated_atom::value, sum / double(nb));
  return sum / double(nb);
}

}  // namespace merak::actors
