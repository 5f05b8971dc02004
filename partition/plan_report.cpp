// What a plan says of itself and what the planner's figures rest on: its
// one-line summary, Megatron-LM's FLOP count (the MFU's numerator) and where
// the CPU profile is cached. The search itself is in planner.cpp.
#include <cstdlib>
#include <string>


#include <fmt/format.h>

#include "model/llama.hpp"
#include "partition/planner.hpp"

namespace merak::partition {

double megatron_flops(const model::gpt_config& m, int64_t global_batch, bool recompute) {
  const double B = double(global_batch), s = m.max_seq, l = m.layers, h = m.dim,
               V = m.padded_vocab();
  const bool llama = m.family == model::model_family::llama;
  // Key/value heads per query head, the MLP's width over h and its gate.
  const double kv_ratio = llama && m.query_groups > 0 ? double(m.query_groups) / m.heads : 1.0;
  const double ffn =
      (llama ? double(m.ffn_hidden > 0 ? m.ffn_hidden : model::llama_ffn_hidden(m.dim)) : 4 * h) /
      h;
  const double gate = llama ? 1.5 : 1.0;
  const double layer_terms = (1 + kv_ratio + s / h) + ffn * gate;
  // Full recomputation runs each layer's forward twice: 4/3 of its work.
  const double layers = recompute ? layer_terms * 4.0 / 3.0 : layer_terms;
  return 12 * B * s * l * h * h * (layers + V / (2 * l * h));
}

const char* plan::recompute_name() const {
  int segments = 0;
  for (auto& s : stages) segments += s.recompute_segments;
  if (recompute == recompute_kind::stage_aware && segments == 0) return "none";
  return recompute_kind_name(recompute);
}

std::string plan::str() const {
  return fmt::format(
      "dp={} tp={} pp={} m={} {}{} {} tp-overlap={}{}{}: {:.4g} s/step, {:.0f} "
      "tokens/s, MFU {:.1f}%",
      dp, tp, pp, micro_batches, schedule_name(schedule),
      chunks > 1 ? fmt::format(" chunks={}", chunks) : "", recompute_str(recompute_name()),
      tp_overlap,
      sharding == sharding_strategy::no_shard
          ? ""
          : fmt::format(" sharding={}", sharding_strategy_name(sharding)),
      sequence_parallel ? " sequence-parallel" : "", step_time_s, tokens_per_s, 100 * mfu);
}

std::string default_profile_cache() {
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x)
    return std::string(x) + "/merak/cpu-profile.json";
  if (const char* h = std::getenv("HOME"); h && *h)
    return std::string(h) + "/.cache/merak/cpu-profile.json";
  return "";
}

}  // namespace merak::partition
