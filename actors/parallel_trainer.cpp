// parallel_trainer: the options, and a facade over the coordinator (coordinator.hpp).
#include "actors/coordinator.hpp"

namespace merak::actors {

void parallel_options::validate(int batch) const {
  partition::layout::validate(batch);
  if (schedule == partition::schedule_kind::zb_h1 &&
      (recompute == recompute_mode::full || recompute == recompute_mode::stage_aware))
    fail("--schedule zb-h1 runs without recomputation (got --recompute {})",
         recompute == recompute_mode::full ? "full" : "stage-aware");
  if (partition::shards_gradients(sharding) && schedule == partition::schedule_kind::zb_h1)
    fail(
        "--data-parallel-sharding-strategy {} reduce-scatters each micro-batch's "
        "gradients as its backward ends; --schedule zb-h1 defers weight gradients past the next "
        "micro-batches' backward (use optim with zb-h1)",
        partition::sharding_strategy_name(sharding));
  if (overlap_param_gather && sharding == partition::sharding_strategy::no_shard)
    fail(
        "--overlap-param-gather overlaps the distributed optimizer's all-gather: it needs "
        "--use-distributed-optimizer (or --data-parallel-sharding-strategy optim_grads)");
  // A year at most: CAF's timeouts count nanoseconds in an int64.
  if (!(timeout_s > 0 && timeout_s <= 31536000))
    fail("--step-timeout must be a number above 0 and at most 31536000 seconds (got {})",
         timeout_s);
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
         recompute == recompute_mode::full || recompute == recompute_mode::stage_aware ||
         memory_budget > 0;
}

std::unique_ptr<model::training_job> make_training_job(model::train_options opts,
                                                       parallel_options par) {
  par.validate(opts.batch);  // before the layout decides which trainer
  if (par.recompute == recompute_mode::selective) opts.recompute_attention = true;
  if (par.needs_actors())
    return std::make_unique<parallel_trainer>(std::move(opts), std::move(par));
  return std::make_unique<model::trainer>(std::move(opts));
}

parallel_trainer::parallel_trainer(model::train_options opts, parallel_options par)
    : parallel_trainer(opts, par, model::open_token_source(opts)) {}

parallel_trainer::parallel_trainer(model::train_options opts, parallel_options par,
                                   model::text_corpus corpus)
    : parallel_trainer(std::move(opts), std::move(par),
                       std::make_shared<const model::text_corpus>(std::move(corpus))) {}

parallel_trainer::parallel_trainer(model::train_options opts, parallel_options par,
                                   std::shared_ptr<const model::token_source> corpus)
    : coordinator_(
          std::make_unique<coordinator>(std::move(opts), std::move(par), std::move(corpus))) {}

parallel_trainer::parallel_trainer(model::train_options opts, parallel_options par,
                                   model::text_corpus corpus, caf::actor_system& system)
    : coordinator_(std::make_unique<coordinator>(
          std::move(opts), std::move(par),
          std::make_shared<const model::text_corpus>(std::move(corpus)), &system)) {}

void parallel_trainer::configure(caf::actor_system_config& cfg) {
  add_message_types(cfg);
  cfg.load<caf::io::middleman>();
}

parallel_trainer::~parallel_trainer() = default;

const model::train_options& parallel_trainer::options() const {
  return coordinator_->state().opts;
}
model::step_result parallel_trainer::train_step() {
  return coordinator_->train_step();
}
std::string parallel_trainer::save() {
  return coordinator_->save();
}
bool parallel_trainer::writes_outputs() const {
  return coordinator_->lead();
}
const memory_use& parallel_trainer::last_memory() const {
  return coordinator_->state().memory;
}
std::vector<std::pair<std::string, double>> parallel_trainer::step_metrics() const {
  auto& par = coordinator_->state().par;
  std::vector<std::pair<std::string, double>> m{{"bubble", coordinator_->state().bubble}};
  if (par.dp > 1)
    m.emplace_back("dp_bytes_per_rank", double(coordinator_->state().comm.dp_bytes_per_rank));
  if (par.sparse.kind != comm::codec_kind::dense)
    m.emplace_back("sparse_union_rows", double(coordinator_->state().comm.sparse_union_rows));
  if (par.measure_sparse_error)
    m.emplace_back("sparse_rel_error", coordinator_->state().comm.sparse_rel_error);
  auto& mem = coordinator_->state().memory;
  m.emplace_back("memory_bytes/parameters", double(mem.parameters));
  m.emplace_back("memory_bytes/gradients", double(mem.gradients));
  m.emplace_back("memory_bytes/optimizer", double(mem.optimizer));
  m.emplace_back("memory_bytes/activations_peak", double(mem.activations_peak));
  m.emplace_back("memory_bytes/gradients_peak", double(mem.gradients_peak));
  return m;
}
std::string parallel_trainer::describe() const {
  auto& par = coordinator_->state().par;
  return fmt::format(
      "model {} on dp={} tp={} pp={}{} (stages at nodes {}), {} micro-batches, schedule {}, "
      "tp-overlap {}{}{}{}\nrecomputation: {}",
      coordinator_->state().opts.model.str(), par.dp, par.tp, par.pp,
      par.chunks > 1 ? fmt::format(" x {} chunks", par.chunks) : "",
      fmt::join(coordinator_->state().bounds, ","), par.micro_batches,
      partition::schedule_name(par.schedule), par.tp_overlap,
      par.sequence_parallel ? ", sequence parallel" : "",
      par.sharding != partition::sharding_strategy::no_shard
          ? fmt::format(", optimizer sharded ({}{})", partition::sharding_strategy_name(par.sharding),
                        par.overlap_param_gather ? ", --overlap-param-gather" : "")
          : "",
      coordinator_->state().place.world > 1
          ? fmt::format(", {} processes (placement {}{})", coordinator_->state().place.world,
                        coordinator_->state().place.str(),
                        par.processes && par.processes->credentials().tls
                            ? "; actor and bootstrap connections under TLS"
                            : "")
          : "",
      coordinator_->state().plan_summary);
}
double parallel_trainer::last_bubble_fraction() const {
  return coordinator_->state().bubble;
}
parallel_trainer::comm_stats parallel_trainer::last_comm() const {
  return coordinator_->state().comm;
}
double parallel_trainer::validation_loss() {
  return coordinator_->validation_loss();
}
int64_t parallel_trainer::step() const {
  return coordinator_->state().step;
}
const std::vector<int>& parallel_trainer::stage_bounds() const {
  return coordinator_->state().bounds;
}
std::string parallel_trainer::recompute_plan() const {
  return coordinator_->state().plan_summary;
}
std::string parallel_trainer::placement() const {
  return coordinator_->state().place.str();
}

}  // namespace merak::actors
