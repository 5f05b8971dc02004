#include "partition/critical_path.hpp"

#include <cmath>
#include <map>
#include <utility>

#include <fmt/format.h>

namespace merak::partition {

critical_path walk_critical_path(const pipeline_trace& tr, const link_delay_fn& delay) {
  critical_path cp;
  const int p = int(tr.stages.size());
  cp.stage_ops.assign(p, 0);
  if (p == 0) return cp;
  // Where each stage ran the forward (F or Fpc) and the backward of a micro-batch.
  std::vector<std::map<std::pair<int, int>, int>> fwd(p), bwd(p);  // by (mb, chunk)
  int chunks = 1;
  int s = 0, i = -1;
  double last_end = -1;
  for (int k = 0; k < p; ++k)
    for (int j = 0; j < int(tr.stages[k].size()); ++j) {
      const auto& t = tr.stages[k][j];
      const std::pair key{t.what.mb, t.what.chunk};
      if (t.what.kind == op_kind::F || t.what.kind == op_kind::Fpc) fwd[k][key] = j;
      if (t.what.kind == op_kind::B) bwd[k][key] = j;
      chunks = std::max(chunks, t.what.chunk + 1);
      if (t.end > last_end) {
        last_end = t.end;
        s = k;
        i = j;
      }
    }
  if (i < 0) return cp;
  auto name = [&](int k, int j) { return fmt::format("s{}:{}", k, op_name(tr.stages[k][j].what)); };
  cp.last_op = name(s, i);
  const double eps = 1e-9 * std::max(1.0, tr.makespan);
  for (;;) {
    const auto& t = tr.stages[s][i];
    ++cp.ops;
    ++cp.stage_ops[s];
    (t.what.kind == op_kind::B || t.what.kind == op_kind::W ? cp.backward_s : cp.forward_s) +=
        t.end - t.start;
    cp.first_op = name(s, i);
    if (i > 0 && std::abs(tr.stages[s][i - 1].end - t.start) <= eps) {
      --i;  // waited for its own stage
      continue;
    }
    // Waited for a message: the forward before or the backward after (the
    // previous or next virtual stage when interleaved).
    int from = -1, j = -1;
    const int mb = t.what.mb, c = t.what.chunk;
    if (t.what.kind == op_kind::F || t.what.kind == op_kind::Fpc) {
      const std::pair key = s > 0 ? std::pair{mb, c} : std::pair{mb, c - 1};
      const int k = s > 0 ? s - 1 : p - 1;
      if ((s > 0 || c > 0) && fwd[k].count(key)) from = k, j = fwd[k][key];
    }
    if (t.what.kind == op_kind::B) {
      const std::pair key = s + 1 < p ? std::pair{mb, c} : std::pair{mb, c + 1};
      const int k = s + 1 < p ? s + 1 : 0;
      if ((s + 1 < p || c + 1 < chunks) && bwd[k].count(key)) from = k, j = bwd[k][key];
    }
    if (from < 0) break;
    const double arrive = tr.stages[from][j].end + delay(from, s, mb);
    if (std::abs(arrive - t.start) > eps) break;
    cp.links_s += delay(from, s, mb);
    s = from;
    i = j;
  }
  return cp;
}

}  // namespace merak::partition
