#include "actors/auto_plan.hpp"

#include <thread>

#include <nlohmann/json.hpp>

#include "job/bootstrap.hpp"
#include "core/error.hpp"

namespace merak::actors {
namespace {

// What process 0 tells the others of its choice.
std::string encode_layout(const parallel_options& p) {
  return nlohmann::json{{"dp", p.dp},
                        {"tp", p.tp},
                        {"pp", p.pp},
                        {"micro_batches", p.micro_batches},
                        {"schedule", partition::schedule_name(p.schedule)},
                        {"chunks", p.chunks},
                        {"recompute", partition::recompute_kind_name(p.recompute)},
                        {"tp_overlap", p.tp_overlap},
                        {"stage_bounds", p.stage_bounds},
                        {"memory_budget", p.memory_budget},
                        {"placement", p.placement}}
      .dump();
}

void decode_layout(const std::string& blob, parallel_options& p) {
  if (blob.empty()) fail("process 0 found no plan for --devices (its error says why)");
  try {
    auto j = nlohmann::json::parse(blob);
    p.dp = j.at("dp"), p.tp = j.at("tp"), p.pp = j.at("pp");
    p.micro_batches = j.at("micro_batches");
    p.schedule = partition::parse_schedule(j.at("schedule").get<std::string>());
    p.chunks = j.at("chunks");
    p.recompute = partition::parse_recompute_kind(j.at("recompute").get<std::string>());
    p.tp_overlap = j.at("tp_overlap");
    p.stage_bounds = j.at("stage_bounds").get<std::vector<int>>();
    p.memory_budget = j.at("memory_budget");
    p.placement = j.at("placement");
  } catch (const nlohmann::json::exception& e) {
    fail("process 0's plan for --devices: {}", e.what());
  }
}

}  // namespace

device_plan plan_for_devices(const model::train_options& opts, int devices, parallel_options base,
                             const std::string& profile_cache) {
  if (devices < 1) fail("devices must be at least 1 (got {})", devices);
  const int world = base.processes ? base.processes->size() : 1;
  if (devices < world)
    fail("--devices {} is fewer than the job's {} processes (each hosts at least one actor)",
         devices, world);
  device_plan out;
  if (world > 1 && base.processes->rank() != 0) {
    // Process 0's choice, so that every process runs the same layout.
    auto blobs = base.processes->allgather({});
    out.options = std::move(base);
    decode_layout(blobs.at(0), out.options);
    return out;
  }
  partition::plan_request r;
  r.model = opts.model;
  r.global_batch = opts.batch;
  r.devices = devices;
  r.processes = world;  // the actor devices share the processes' cores
  r.device = partition::find_device("cpu");
  r.memory_budget = base.memory_budget;
  r.bucket_bytes = base.bucket_bytes;
  r.recompute_layers = base.recompute_layers;
  r.search_recompute_layers = base.recompute_layers == 0;
  const int per_process =
      base.threads > 0 ? base.threads : int(std::thread::hardware_concurrency());
  const int cores = std::max(1, per_process) * world;
  auto costs = partition::costs_for(r, cores, profile_cache);

  try {
    out.search = partition::search_plans(r, *costs);
  } catch (...) {
    if (world > 1) base.processes->allgather({});  // the others fail on an empty plan
    throw;
  }
  const auto& b = out.search.best;
  auto& p = out.options = std::move(base);
  static_cast<partition::layout&>(p) = b;  // recompute: the runtime's mode, below
  if (world > 1)
    p.placement = (b.chunks > 1 ? partition::with_chunks(b.place, b.chunks) : b.place).str();
  // The (virtual) stages the planner balanced by measured time, not the
  // runtime's default split by FLOPs.
  p.stage_bounds.clear();
  const auto& cut = b.chunks > 1 ? b.chunk_stages : b.stages;
  for (const auto& st : cut) p.stage_bounds.push_back(st.first);
  if (!cut.empty()) p.stage_bounds.push_back(cut.back().last);
  bool any = false;
  for (const auto& st : b.stages) any = any || st.recompute_segments > 0;
  if (b.recompute == partition::recompute_kind::full) {
    p.recompute = recompute_mode::full;
  } else if (any) {  // the least recomputation that fits the budget
    p.recompute = recompute_mode::stage_aware;
    if (p.memory_budget == 0) p.memory_budget = int64_t(r.device.memory_bytes);
  } else {
    p.recompute = recompute_mode::none;
  }
  if (world > 1) p.processes->allgather(encode_layout(p));
  return out;
}

}  // namespace merak::actors
