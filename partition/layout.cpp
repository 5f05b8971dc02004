#include "partition/layout.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.hpp"

namespace merak::partition {

void layout::validate(int64_t batch) const {
  if (sequence_parallel && tp < 2)
    fail("--sequence-parallel splits tensor-parallel regions: it needs --tp 2 or more (got {})",
         tp);
  if (dp < 1) fail("--dp must be at least 1 (got {})", dp);
  if (pp < 1) fail("--pp must be at least 1 (got {})", pp);
  if (tp < 1) fail("--tp must be at least 1 (got {})", tp);
  if (tp_overlap < 0 || tp_overlap > 2) fail("--tp-overlap must be 0, 1 or 2 (got {})", tp_overlap);
  if (micro_batches < 1) fail("--micro-batches must be at least 1 (got {})", micro_batches);
  if (recompute_layers < 0)
    fail("--recompute-num-layers must be at least 1 (got {})", recompute_layers);
  if (batch % (int64_t(dp) * micro_batches) != 0)
    fail("--batch {} does not split into --dp {} x --micro-batches {} equal parts", batch, dp,
         micro_batches);
  if (schedule == schedule_kind::interleaved) {
    if (chunks < 2) fail("--schedule interleaved needs --chunks of at least 2 (got {})", chunks);
    if (pp < 2) fail("--schedule interleaved needs --pp of at least 2 (got {})", pp);
    if (micro_batches % pp != 0)
      fail("--schedule interleaved needs --micro-batches a multiple of --pp {} (got {})", pp,
           micro_batches);
    if (recompute == recompute_kind::stage_aware)
      fail("--schedule interleaved recomputes all or nothing (got --recompute stage-aware)");
  } else if (chunks != 1) {
    fail("--chunks {} needs --schedule interleaved (got {})", chunks, schedule_name(schedule));
  }
}

std::string layout::recompute_str(std::string_view kind) const {
  return fmt::format("recompute={}{}", kind,
                     recompute_layers > 0 && kind != "none"
                         ? fmt::format(" recompute-layers={}", recompute_layers)
                         : "");
}

std::string layout::str() const {
  return fmt::format("dp={} tp={} pp={} m={} {}{} {} tp-overlap={}{}{}{}", dp, tp, pp,
                     micro_batches, schedule_name(schedule),
                     chunks > 1 ? fmt::format(" chunks={}", chunks) : "",
                     recompute_str(recompute_kind_name(recompute)), tp_overlap,
                     sequence_parallel ? " sequence-parallel" : "",
                     sharding == sharding_strategy::no_shard
                         ? ""
                         : fmt::format(" sharding={}", sharding_strategy_name(sharding)),
                     overlap_param_gather ? " overlap-param-gather" : "");
}

const char* sharding_strategy_name(sharding_strategy s) {
  switch (s) {
    case sharding_strategy::no_shard:
      return "no_shard";
    case sharding_strategy::optim:
      return "optim";
    case sharding_strategy::optim_grads:
      return "optim_grads";
    case sharding_strategy::optim_grads_params:
      return "optim_grads_params";
  }
  return "?";
}

sharding_strategy parse_sharding_strategy(std::string_view name) {
  for (auto s : {sharding_strategy::no_shard, sharding_strategy::optim,
                 sharding_strategy::optim_grads, sharding_strategy::optim_grads_params})
    if (name == sharding_strategy_name(s)) return s;
  fail("--data-parallel-sharding-strategy: unknown strategy '{}' (expected no_shard, optim, "
       "optim_grads or optim_grads_params)",
       name);
}

int micro_batches_for_size(int64_t batch, int dp, int size, const char* batch_flag) {
  if (size < 1) fail("--micro-batch-size must be at least 1 (got {})", size);
  const int64_t per = int64_t(std::max(1, dp)) * size;
  if (batch % per != 0)
    fail(
        "--micro-batch-size {}: {} {} is not a whole number of micro-batches of {} per replica "
        "(dp {})",
        size, batch_flag, batch, size, std::max(1, dp));
  return int(batch / per);
}

}  // namespace merak::partition
