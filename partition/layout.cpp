#include "partition/layout.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.hpp"

namespace merak::partition {

void layout::validate(int64_t batch) const {
  if (dp < 1) fail("--dp must be at least 1 (got {})", dp);
  if (pp < 1) fail("--pp must be at least 1 (got {})", pp);
  if (tp < 1) fail("--tp must be at least 1 (got {})", tp);
  if (tp_overlap < 0 || tp_overlap > 2) fail("--tp-overlap must be 0, 1 or 2 (got {})", tp_overlap);
  if (micro_batches < 1) fail("--micro-batches must be at least 1 (got {})", micro_batches);
  if (batch % (int64_t(dp) * micro_batches) != 0)
    fail("--batch {} does not split into --dp {} x --micro-batches {} equal parts", batch, dp,
         micro_batches);
}

std::string layout::str() const {
  return fmt::format("dp={} tp={} pp={} m={} {} recompute={} tp-overlap={}", dp, tp, pp,
                     micro_batches, schedule_name(schedule), recompute_kind_name(recompute),
                     tp_overlap);
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
