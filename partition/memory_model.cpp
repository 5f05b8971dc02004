#include "partition/memory_model.hpp"

#include <algorithm>

#include "core/error.hpp"

namespace merak::partition {

state_bytes state_bytes_per_parameter(state_precision p, sharding_strategy s, int d) {
  if (d < 1) fail("the data-parallel size must be at least 1 (got {})", d);
  const bool mixed = p == state_precision::bf16_mixed;
  state_bytes out{mixed ? 2.0 : 4.0, 4.0, mixed ? 12.0 : 8.0};
  const double n = d;
  switch (s) {
    case sharding_strategy::optim_grads_params:
      out.parameters /= n;
      [[fallthrough]];
    case sharding_strategy::optim_grads:
      out.gradients /= n;
      [[fallthrough]];
    case sharding_strategy::optim:
      out.optimizer /= n;
      [[fallthrough]];
    case sharding_strategy::no_shard:
      break;
  }
  return out;
}

double layer_activation_bytes(int64_t s, int64_t b, int64_t h, int64_t a, int t,
                              bool sequence_parallel, activation_recompute r) {
  if (s < 1 || b < 1 || h < 1 || a < 1 || t < 1)
    fail("layer activations need positive s, b, h, a, t (got {}, {}, {}, {}, {})", s, b, h, a, t);
  const double sbh = double(s) * double(b) * double(h), T = t;
  const bool sp = sequence_parallel && t > 1;
  if (r == activation_recompute::full) return sp ? 2 * sbh / T : 2 * sbh;
  // The attention core: scores and softmax output 2 bytes each, the dropout
  // mask 1 and its output 2 (5as^2b in all), split over the heads' shards.
  const double core = r == activation_recompute::selective ? 0.0 : 5.0 * a * s / (h * T);
  // Outside the TP-split GEMMs (norms, dropouts, residuals, the inputs of
  // QKV and fc1): 10 sbh replicated, or split by t with sequence parallelism.
  const double outside = sp ? 10.0 / T : 10.0;
  return sbh * (outside + 24.0 / T + core);
}

double full_recompute_working_bytes(int64_t s, int64_t b, int64_t h, int64_t a, int t,
                                    bool sequence_parallel) {
  return layer_activation_bytes(s, b, h, a, t, sequence_parallel, activation_recompute::none);
}

double first_stage_activation_bytes(int64_t s, int64_t b, int64_t h, int64_t a, int64_t layers,
                                    int t, bool sequence_parallel, activation_recompute r) {
  double bytes = double(layers) * layer_activation_bytes(s, b, h, a, t, sequence_parallel, r);
  if (r == activation_recompute::full)
    bytes += full_recompute_working_bytes(s, b, h, a, t, sequence_parallel);
  return bytes;
}

stage_weight_bytes stage_weights(int64_t P, int64_t max_segment, int64_t max_node, int d,
                                 sharding_strategy sh, int64_t bucket_bytes,
                                 double held_value_bytes) {
  stage_weight_bytes sp;
  const int64_t buckets = d > 1 ? 4 * P : 0;
  sp.parameters = 4 * P;
  sp.gradients = 4 * P + buckets;
  sp.optimizer = 8 * P;
  if (sh != sharding_strategy::no_shard) sp.optimizer = 8 * P / d;
  sp.gradients_peak = sp.gradients;
  if (shards_gradients(sh)) {
    sp.gradients = 4 * P / d;
    if (d > 1)
      sp.gradients_peak =
          std::min(sp.gradients_peak,
                   sp.gradients + 4 * max_node + 4 * std::min(bucket_bytes, 4 * P));
    else
      sp.gradients_peak = sp.gradients;
  }
  if (shards_parameters(sh) && d > 1) {
    // Gathered units in float bytes: the one in use, held as the run keeps
    // gathered values, and the next one's float buffer while it arrives.
    const int64_t unit = std::max(4 * max_segment, std::min(bucket_bytes, 4 * P));
    const double held = std::clamp(held_value_bytes, 1.0, 4.0);
    sp.parameters = 4 * P / d + std::min(4 * P, unit + int64_t(double(unit) * held / 4.0));
  } else if (shards_parameters(sh)) {
    sp.parameters = 4 * P;
  }
  return sp;
}

}  // namespace merak::partition
