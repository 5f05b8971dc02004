#include "partition/schedule.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "core/error.hpp"

namespace merak::partition {

std::string_view schedule_name(schedule_kind k) {
  switch (k) {
    case schedule_kind::gpipe:
      return "gpipe";
    case schedule_kind::one_f_one_b:
      return "1f1b";
    case schedule_kind::shifted:
      return "shifted";
    case schedule_kind::zb_h1:
      return "zb-h1";
    case schedule_kind::interleaved:
      return "interleaved";
  }
  return "?";
}

schedule_kind parse_schedule(std::string_view name) {
  if (name == "gpipe") return schedule_kind::gpipe;
  if (name == "1f1b") return schedule_kind::one_f_one_b;
  if (name == "shifted") return schedule_kind::shifted;
  if (name == "zb-h1") return schedule_kind::zb_h1;
  if (name == "interleaved") return schedule_kind::interleaved;
  fail("unknown schedule '{}' (expected gpipe, 1f1b, shifted, zb-h1 or interleaved)", name);
}

std::string op_name(const op& operation) {
  static const char* names[] = {"F", "Fpc", "R", "B", "W"};
  if (operation.chunk > 0)
    return fmt::format("{}{}.{}", names[int(operation.kind)], operation.mb, operation.chunk);
  return fmt::format("{}{}", names[int(operation.kind)], operation.mb);
}

op_target next_for(const op& operation, int stage, int p, int v) {
  const bool fwd = operation.kind == op_kind::F || operation.kind == op_kind::Fpc;
  if (fwd) {
    if (stage + 1 < p) return {stage + 1, operation.chunk};
    if (operation.chunk + 1 < v) return {0, operation.chunk + 1};
    return {-1, 0};
  }
  if (operation.kind == op_kind::B) {
    if (stage > 0) return {stage - 1, operation.chunk};
    if (operation.chunk > 0) return {p - 1, operation.chunk - 1};
  }
  return {-1, 0};
}

stage_policy make_policy(schedule_kind kind, int p, int m, int s, bool full_recompute, int chunks) {
  if (p < 1) fail("--pp must be at least 1 (got {})", p);
  if (m < 1) fail("--micro-batches must be at least 1 (got {})", m);
  if (s < 0 || s >= p) fail("stage {} outside [0, {})", s, p);
  stage_policy pol;
  pol.stage = s;
  pol.stages = p;
  pol.micro_batches = m;
  pol.recompute_in_backward = full_recompute && s < p - 1;
  switch (kind) {
    case schedule_kind::gpipe:
      pol.limited = false;
      pol.forward_first = true;
      pol.warm = pol.steady = m;
      break;
    case schedule_kind::one_f_one_b:
      pol.warm = pol.steady = p - s;
      break;
    case schedule_kind::interleaved:
      if (chunks < 2) fail("the interleaved schedule needs at least 2 chunks (got {})", chunks);
      if (m % p != 0)
        fail("the interleaved schedule needs micro-batches ({}) a multiple of --pp ({})", m, p);
      pol.chunks = chunks;
      // Megatron-LM's warm-up, then one forward and one backward in turn.
      pol.warm = pol.steady = std::min(m * chunks, (p - s - 1) * 2 + (chunks - 1) * p + 1);
      break;
    case schedule_kind::zb_h1:
      if (full_recompute) fail("the zb-h1 schedule runs without recomputation");
      // 1F1B's forwards before the first backward; after it, up to p
      // micro-batches awaiting their W on any stage, the most 1F1B's first
      // stage holds: deferred Ws then fill the waits at the end.
      pol.warm = p - s;
      pol.steady = p;
      pol.split_weight = true;
      break;
    case schedule_kind::shifted:
      pol.warm = pol.steady = p - s;
      pol.recompute_in_backward = false;  // the shifted schedule moves it out of backward
      if (p >= 3 && m >= std::max(4, p)) {
        if (s <= p - 3)
          for (int i = m - (p - s - 1); i < m; ++i) pol.pre.insert(i);
        if (s == p - 3) pol.pre.insert(0);
        if (s == p - 2) {
          pol.pre = {0, 1};
          pol.warm = 3;
          pol.steady = 2;
        }
      }
      break;
  }
  return pol;
}

stage_scheduler::stage_scheduler(stage_policy policy)
    : policy_(std::move(policy)),
      act_(size_t(policy_.micro_batches) * policy_.chunks, false),
      grad_(act_.size(), false),
      recomputed_(act_.size(), false),
      forwarded_slot_(act_.size(), false) {}

op forward_at(const stage_policy& pol, int k) {
  const int v = pol.chunks, p = pol.stages;
  if (v == 1) return {op_kind::F, k, 0};
  return {op_kind::F, (k / (p * v)) * p + k % p, (k / p) % v};
}

op backward_at(const stage_policy& pol, int k) {
  const int v = pol.chunks, p = pol.stages;
  if (v == 1) return {op_kind::B, k, 0};
  return {op_kind::B, (k / (p * v)) * p + k % p, v - 1 - (k / p) % v};
}

int chunk_in_flight(const stage_policy& pol, int chunk) {
  const int total = pol.micro_batches * pol.chunks;
  const int limit = pol.limited ? std::max(pol.warm, pol.steady) : total;
  int held = 0, most = 0;
  for (int f = 0; f < total; ++f) {  // forward f runs, backward f - limit has
    if (forward_at(pol, f).chunk == chunk) ++held;
    if (f >= limit && backward_at(pol, f - limit).chunk == chunk) --held;
    most = std::max(most, held);
  }
  return most;
}

void stage_scheduler::activation_arrived(int mb, int chunk) {
  MERAK_CHECK(mb >= 0 && mb < policy_.micro_batches && chunk >= 0 && chunk < policy_.chunks,
              "activation of micro-batch {} chunk {}", mb, chunk);
  act_[slot({op_kind::F, mb, chunk})] = true;
}

void stage_scheduler::gradient_arrived(int mb, int chunk) {
  MERAK_CHECK(mb >= 0 && mb < policy_.micro_batches && chunk >= 0 && chunk < policy_.chunks,
              "gradient of micro-batch {} chunk {}", mb, chunk);
  grad_[slot({op_kind::B, mb, chunk})] = true;
}

bool stage_scheduler::keeps_stash(int mb) const {
  return !policy_.recompute_in_backward && !policy_.pre.count(mb);
}

bool stage_scheduler::f_eligible() const {
  const int total = policy_.micro_batches * policy_.chunks;
  if (forwarded_ >= total || !act_[slot(forward_at(forwarded_))]) return false;
  if (!policy_.limited) return true;
  int limit = any_backward_ ? policy_.steady : policy_.warm;
  return in_flight() < limit;
}

bool stage_scheduler::b_eligible() const {
  if (backwarded_ >= forwarded_) return false;
  const op b = backward_at(backwarded_);
  if (!forwarded_slot_[slot(b)]) return false;
  bool last = policy_.stage == policy_.stages - 1 && b.chunk == policy_.chunks - 1;
  if (!last && !grad_[slot(b)]) return false;
  // The stash exists if F kept it, or R rebuilt it; with full recomputation
  // B rebuilds it itself.
  return keeps_stash(b.mb) || recomputed_[slot(b)] || policy_.recompute_in_backward;
}

bool stage_scheduler::r_eligible() const {
  if (backwarded_ >= forwarded_) return false;
  const op b = backward_at(backwarded_);
  return policy_.pre.count(b.mb) && !recomputed_[slot(b)];
}

bool stage_scheduler::w_eligible() const {
  return policy_.split_weight && weighted_ < backwarded_;
}

std::optional<op> stage_scheduler::next() {
  MERAK_CHECK(!busy_, "next() while an op is running");
  auto pick = choose();
  if (pick) busy_ = true;
  return pick;
}

bool stage_scheduler::has_eligible() const {
  return !busy_ && choose().has_value();
}

std::optional<op> stage_scheduler::choose() const {
  if (!policy_.order.empty()) {  // the next op of the fixed order, once its inputs are here
    if (ran_ >= policy_.order.size()) return std::nullopt;
    const op o = policy_.order[ran_];
    const bool last = policy_.stage == policy_.stages - 1 && o.chunk == policy_.chunks - 1;
    const bool here = o.kind == op_kind::F || o.kind == op_kind::Fpc ? act_[slot(o)]
                      : o.kind == op_kind::B                         ? last || grad_[slot(o)]
                                                                     : true;
    return here ? std::optional<op>(o) : std::nullopt;
  }
  bool f = f_eligible(), b = b_eligible();
  std::optional<op> pick;
  bool prefer_f = policy_.forward_first || last_was_backward_;
  if (f && (prefer_f || !b)) {
    pick = forward_at(forwarded_);
    if (policy_.pre.count(pick->mb) || policy_.recompute_in_backward) pick->kind = op_kind::Fpc;
  } else if (b) {
    pick = backward_at(backwarded_);
  } else if (r_eligible()) {
    pick = backward_at(backwarded_);
    pick->kind = op_kind::R;
  } else if (w_eligible()) {
    pick = backward_at(weighted_);  // fills what would be a wait
    pick->kind = op_kind::W;
  }
  return pick;
}

void stage_scheduler::completed(const op& operation) {
  MERAK_CHECK(busy_, "completed() without a running op");
  busy_ = false;
  ++ran_;
  auto same = [&](op want) { return want.mb == operation.mb && want.chunk == operation.chunk; };
  switch (operation.kind) {
    case op_kind::F:
    case op_kind::Fpc:
      MERAK_CHECK(same(forward_at(forwarded_)), "forward of {} out of order", op_name(operation));
      forwarded_slot_[slot(operation)] = true;
      ++forwarded_;
      max_in_flight_ = std::max(max_in_flight_, in_flight());
      last_was_backward_ = false;
      break;
    case op_kind::R:
      recomputed_[slot(operation)] = true;
      last_was_backward_ = false;
      break;
    case op_kind::B:
      MERAK_CHECK(same(backward_at(backwarded_)), "backward of {} out of order",
                  op_name(operation));
      ++backwarded_;
      any_backward_ = true;
      last_was_backward_ = true;
      break;
    case op_kind::W:
      MERAK_CHECK(same(backward_at(weighted_)), "weight gradient of {} out of order",
                  op_name(operation));
      ++weighted_;
      break;
  }
}

bool stage_scheduler::done() const {
  const int total = policy_.micro_batches * policy_.chunks;
  return backwarded_ == total && (!policy_.split_weight || weighted_ == total);
}

std::vector<op> reference_order(schedule_kind kind, int p, int m, int s) {
  if (kind == schedule_kind::zb_h1 || kind == schedule_kind::interleaved)
    fail("no reference order for {}", schedule_name(kind));
  auto pol = make_policy(kind, p, m, s);
  std::vector<op> out;
  auto fwd = [&](int i) { out.push_back({pol.pre.count(i) ? op_kind::Fpc : op_kind::F, i}); };
  auto bwd = [&](int i) {
    if (pol.pre.count(i)) out.push_back({op_kind::R, i});
    out.push_back({op_kind::B, i});
  };
  if (kind == schedule_kind::gpipe) {
    for (int i = 0; i < m; ++i) fwd(i);
    for (int i = 0; i < m; ++i) bwd(i);
    return out;
  }
  // Warm-up, steady state (one B then one F), cool-down (B only).
  int warm = std::min(m, pol.warm);
  int f = 0, b = 0;
  for (; f < warm; ++f) fwd(f);
  bool back_to_back = kind == schedule_kind::shifted && s == p - 2 && !pol.pre.empty();
  while (b < m) {
    bwd(b++);
    if (back_to_back && b == 1) continue;  // stage p-2 of shifted: B0 B1 adjacent
    if (f < m) fwd(f++);
  }
  return out;
}

}  // namespace merak::partition
