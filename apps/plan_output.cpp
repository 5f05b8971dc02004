#include "apps/plan_output.hpp"

#include <cstdlib>

#include <fmt/format.h>

namespace merak::apps {

nlohmann::json plan_json(const partition::plan& p) {
  nlohmann::json stages = nlohmann::json::array();
  for (auto& s : p.stages)
    stages.push_back({{"layers", {s.first_layer, s.last_layer}},
                      {"nodes", {s.first, s.last}},
                      {"recompute_segments", s.recompute_segments},
                      {"segments", s.segments},
                      {"memory_bytes", s.memory_bytes},
                      {"forward_s", s.forward_s},
                      {"backward_s", s.backward_s}});
  return {{"dp", p.dp},
          {"tp", p.tp},
          {"pp", p.pp},
          {"micro_batches", p.micro_batches},
          {"schedule", std::string(partition::schedule_name(p.schedule))},
          {"recompute", p.recompute_name()},
          {"tp_overlap", p.tp_overlap},
          {"stages", stages},
          {"step_time_s", p.step_time_s},
          {"pipeline_s", p.pipeline_s},
          {"dp_exposed_s", p.dp_exposed_s},
          {"optimizer_s", p.optimizer_s},
          {"tokens_per_s", p.tokens_per_s},
          {"mfu", p.mfu},
          {"processes", p.place.world},
          {"placement", p.place.str()},
          {"host_of_rank", p.host_of_rank}};
}

nlohmann::json plan_json(const partition::plan_request& r, const partition::plan_result& res) {
  auto j = plan_json(res.best);
  j["devices"] = r.devices;
  j["device_type"] = r.device.name;
  j["model"] = r.model.str();
  j["global_batch_size"] = r.global_batch;
  j["evaluated"] = res.evaluated;
  j["simulated"] = res.simulated;
  j["rejected"] = res.rejected;
  j["runners_up"] = nlohmann::json::array();
  for (auto& p : res.runners_up) j["runners_up"].push_back(plan_json(p));
  return j;
}

void print_plan(const partition::plan_request& r, const partition::plan_result& res, FILE* out) {
  auto& b = res.best;
  std::fprintf(out, "model %s, global batch %lld, %d x %s (%d candidates scored)\n",
               r.model.str().c_str(), (long long)r.global_batch, r.devices, r.device.name.c_str(),
               res.evaluated);
  std::fprintf(out, "plan: %s\n", b.str().c_str());
  for (size_t s = 0; s < b.stages.size(); ++s) {
    auto& st = b.stages[s];
    std::fprintf(out,
                 "  stage %zu: %s .. %s, recompute %d/%d segments, %.1f MB, F %.3g s B %.3g s\n", s,
                 st.first_layer.c_str(), st.last_layer.c_str(), st.recompute_segments, st.segments,
                 double(st.memory_bytes) / (1 << 20), st.forward_s, st.backward_s);
  }
  std::fprintf(out, "  step: pipeline %.4g s + exposed dp all-reduce %.4g s + optimizer %.4g s\n",
               b.pipeline_s, b.dp_exposed_s, b.optimizer_s);
  std::fprintf(out, "  placement over %d process%s: --placement %s\n", b.place.world,
               b.place.world == 1 ? "" : "es", b.place.str().c_str());
  for (auto& p : res.runners_up) std::fprintf(out, "runner-up: %s\n", p.str().c_str());
  if (!res.rejected.empty()) {
    std::string why;
    for (auto& [rule, n] : res.rejected)
      why += fmt::format("{}{}: {}", why.empty() ? "" : "; ", rule, n);
    std::fprintf(out, "rejected by rule: %s\n", why.c_str());
  }
}

}  // namespace merak::apps
