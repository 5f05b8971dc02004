#include "actors/auto_plan.hpp"

#include <thread>

#include "core/error.hpp"

namespace merak::actors {

device_plan plan_for_devices(const model::train_options& opts, int devices, parallel_options base,
                             const std::string& profile_cache) {
  if (devices < 1) fail("devices must be at least 1 (got {})", devices);
  partition::plan_request r;
  r.model = opts.model;
  r.global_batch = opts.batch;
  r.devices = devices;
  r.processes = 1;  // the actor devices share this process's cores
  r.device = partition::find_device("cpu");
  r.memory_budget = base.memory_budget;
  const int cores = base.threads > 0 ? base.threads : int(std::thread::hardware_concurrency());
  auto costs = partition::costs_for(r, cores > 0 ? cores : 1, profile_cache);

  device_plan out;
  out.search = partition::search_plans(r, *costs);
  const auto& b = out.search.best;
  auto& p = out.options = std::move(base);
  static_cast<partition::layout&>(p) = b;  // recompute: the runtime's mode, below
  // The stages the planner balanced by measured time, not the runtime's
  // default split by FLOPs.
  p.stage_bounds.clear();
  for (const auto& st : b.stages) p.stage_bounds.push_back(st.first);
  if (!b.stages.empty()) p.stage_bounds.push_back(b.stages.back().last);
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
  return out;
}

}  // namespace merak::actors
