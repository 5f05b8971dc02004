#include "apps/plan_output.hpp"

#include <cstdlib>

#include <fmt/format.h>

namespace merak::apps {

namespace {

nlohmann::json stage_json(const partition::stage_plan& s) {
  return {{"layers", {s.first_layer, s.last_layer}},
          {"nodes", {s.first, s.last}},
          {"recompute_segments", s.recompute_segments},
          {"segments", s.segments},
          {"memory_bytes", s.memory_bytes},
          {"memory_bytes_by_category",
           {{"parameters", s.parameters_bytes},
            {"gradients", s.gradients_bytes},
            {"gradients_peak", s.gradients_peak_bytes},
            {"optimizer", s.optimizer_bytes},
            {"activations_peak", s.activations_bytes}}},
          {"forward_s", s.forward_s},
          {"backward_s", s.backward_s}};
}

}  // namespace

nlohmann::json plan_json(const partition::plan& p) {
  // Interleaved: each device lists its chunks (virtual stage k is chunk
  // k / pp of device k % pp).
  nlohmann::json stages = nlohmann::json::array();
  for (size_t s = 0; s < p.stages.size(); ++s) {
    nlohmann::json j = stage_json(p.stages[s]);
    if (!p.chunk_stages.empty()) {
      j["chunks"] = nlohmann::json::array();
      for (size_t k = s; k < p.chunk_stages.size(); k += p.stages.size())
        j["chunks"].push_back(stage_json(p.chunk_stages[k]));
    }
    stages.push_back(std::move(j));
  }
  return {{"dp", p.dp},
          {"tp", p.tp},
          {"pp", p.pp},
          {"micro_batches", p.micro_batches},
          {"schedule", std::string(partition::schedule_name(p.schedule))},
          {"chunks", p.chunks},
          {"recompute", p.recompute_name()},
          {"recompute_num_layers", p.recompute_layers},
          {"sharding", partition::sharding_strategy_name(p.sharding)},
          {"sequence_parallel", p.sequence_parallel},
          {"tp_overlap", p.tp_overlap},
          {"stages", stages},
          {"step_time_s", p.step_time_s},
          {"pipeline_s", p.pipeline_s},
          {"dp_exposed_s", p.dp_exposed_s},
          {"optimizer_s", p.optimizer_s},
          {"tokens_per_s", p.tokens_per_s},
          {"mfu", p.mfu},
          {"tflops_per_device", p.tflops_per_device},
          {"flop_count", p.flops_count_recompute ? "megatron (full recomputation)"
                                                 : "megatron (no recomputation)"},
          {"tp_allreduce_s", p.tp_allreduce_s},
          {"tp_algorithm", p.tp_algo},
          {"p2p_s", p.p2p_s},
          {"dp_allreduce_s", p.dp_allreduce_s},
          {"dp_algorithm", p.dp_algo},
          {"critical_path",
           {{"ops", p.path.ops},
            {"forward_s", p.path.forward_s},
            {"backward_s", p.path.backward_s},
            {"links_s", p.path.links_s},
            {"stage_ops", p.path.stage_ops},
            {"from", p.path.first_op},
            {"to", p.path.last_op}}},
          {"processes", p.place.world},
          {"placement", p.place.str()},
          {"host_of_rank", p.host_of_rank}};
}

nlohmann::json plan_json(const partition::plan_request& r, const partition::plan_result& res) {
  auto j = plan_json(res.best);
  j["devices"] = r.devices;
  j["device_type"] = r.device.name;
  if (r.cluster) j["cluster"] = r.cluster->name;
  // The attention kernels a GPU device is priced with (a profiled CPU
  // measures its own).
  if (!r.device.profiled) j["attention"] = partition::attention_kernel_name(r.attention);
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
                 "  stage %zu: %s .. %s, recompute %d/%d segments, %.1f MB (parameters %.1f, "
                 "gradients %.1f, optimizer %.1f, activations %.1f), F %.3g s B %.3g s\n",
                 s, st.first_layer.c_str(), st.last_layer.c_str(), st.recompute_segments,
                 st.segments, double(st.memory_bytes) / (1 << 20),
                 double(st.parameters_bytes) / (1 << 20), double(st.gradients_bytes) / (1 << 20),
                 double(st.optimizer_bytes) / (1 << 20), double(st.activations_bytes) / (1 << 20),
                 st.forward_s, st.backward_s);
    for (size_t k = s, c = 0; k < b.chunk_stages.size(); k += b.stages.size(), ++c) {
      auto& ch = b.chunk_stages[k];
      std::fprintf(out, "    chunk %zu: %s .. %s, %.1f MB, F %.3g s B %.3g s\n", c,
                   ch.first_layer.c_str(), ch.last_layer.c_str(),
                   double(ch.memory_bytes) / (1 << 20), ch.forward_s, ch.backward_s);
    }
  }
  std::fprintf(out, "  step: pipeline %.4g s + exposed dp all-reduce %.4g s + optimizer %.4g s\n",
               b.pipeline_s, b.dp_exposed_s, b.optimizer_s);
  std::string where = b.place.str();
  if (where.size() > 160)  // thousands of ranks: the JSON has them all
    where = where.substr(0, where.find(',', 60)) + ",... (" + std::to_string(b.place.world) +
            " ranks; --json lists them)";
  std::fprintf(out, "  placement over %d process%s: --placement %s\n", b.place.world,
               b.place.world == 1 ? "" : "es", where.c_str());
  for (auto& p : res.runners_up) std::fprintf(out, "runner-up: %s\n", p.str().c_str());
  if (!res.rejected.empty()) {
    std::string why;
    for (auto& [rule, n] : res.rejected)
      why += fmt::format("{}{}: {}", why.empty() ? "" : "; ", rule, n);
    std::fprintf(out, "rejected by rule: %s\n", why.c_str());
  }
}

void explain_plan(const partition::plan_request& r, const partition::plan& p, FILE* out) {
  std::fprintf(out, "explain:\n");
  std::fprintf(out, "  %.1f TFLOP/s per device (Megatron's count, %s; peak %.0f)\n",
               p.tflops_per_device,
               p.flops_count_recompute ? "96 B s l h^2 (...), full recomputation"
                                       : "72 B s l h^2 (...), no recomputation",
               r.device.peak_flops / 1e12);
  if (p.tp > 1)
    std::fprintf(out, "  tp all-reduce of one micro-batch's activations: %.4g s (%s, %d ranks)\n",
                 p.tp_allreduce_s, p.tp_algo.c_str(), p.tp);
  if (p.pp > 1)
    std::fprintf(out, "  one activation between stages: %.4g s (the slowest boundary)\n", p.p2p_s);
  if (p.dp > 1)
    std::fprintf(out, "  dp all-reduce of the gradients: %.4g s (%s, %d ranks), %.4g s exposed\n",
                 p.dp_allreduce_s, p.dp_algo.c_str(), p.dp, p.dp_exposed_s);
  const auto& c = p.path;
  std::string per_stage;
  for (size_t s = 0; s < c.stage_ops.size(); ++s)
    per_stage += fmt::format("{}{}", s ? " " : "", c.stage_ops[s]);
  std::fprintf(out,
               "  critical path: %s .. %s, %d ops (per stage: %s): forward %.4g s, backward %.4g "
               "s, messages %.4g s, of the pipeline's %.4g s\n",
               c.first_op.c_str(), c.last_op.c_str(), c.ops, per_stage.c_str(), c.forward_s,
               c.backward_s, c.links_s, p.pipeline_s);
}

}  // namespace merak::apps
