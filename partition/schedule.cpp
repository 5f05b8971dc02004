#include "partition/schedule.hpp"

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
  }
  return "?";
}


schedule_kind parse_schedule(std::string_view name) {
  if (name == "gpipe") return schedule_kind::gpipe;
  if (name == "1f1b") return schedule_kind::one_f_one_b;
  if (name == "shifted") return schedule_kind::shifted;
  if (name == "zb-h1") return schedule_kind::zb_h1;
  fail("unknown schedule '{}' (expected gpipe, 1f1b, shifted or zb-h1)", name);
}

std::string op_name(const op& o) {
  static const char* names[] = {"F", "Fpc", "R", "B", "W"};
  return fmt::format("{}{}", names[int(o.kind)], o.mb);
}

stage_policy make_policy(schedule_kind kind, int p, int m, int s, bool full_recompute) {
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
      act_(policy_.micro_batches, false),
      grad_(policy_.micro_batches, false),
      recomputed_(policy_.micro_batches, false) {}

void stage_scheduler::activation_arrived(int mb) {
  MERAK_CHECK(mb >= 0 && mb < policy_.micro_batches, "activation of micro-batch {}", mb);
  act_[mb] = true;
}

void stage_scheduler::gradient_arrived(int mb) {
  MERAK_CHECK(mb >= 0 && mb < policy_.micro_batches, "gradient of micro-batch {}", mb);
  grad_[mb] = true;
}

bool stage_scheduler::keeps_stash(int mb) const {
  return !policy_.recompute_in_backward && !policy_.pre.count(mb);
}

bool stage_scheduler::f_eligible() const {
  if (forwarded_ >= policy_.micro_batches || !act_[forwarded_]) return false;
  if (!policy_.limited) return true;
  int limit = any_backward_ ? policy_.steady : policy_.warm;
  return in_flight() < limit;
}

bool stage_scheduler::b_eligible() const {
  int b = backwarded_;
  if (b >= forwarded_) return false;
  bool last = policy_.stage == policy_.stages - 1;
  if (!last && !grad_[b]) return false;
  // The stash exists if F kept it, or R rebuilt it; with full recomputation
  // B rebuilds it itself.
  return keeps_stash(b) || recomputed_[b] || policy_.recompute_in_backward;
}

bool stage_scheduler::w_eligible() const {
  return policy_.split_weight && weighted_ < backwarded_;
}

bool stage_scheduler::r_eligible() const {
  int b = backwarded_;
  return b < forwarded_ && policy_.pre.count(b) && !recomputed_[b];
}

std::optional<op> stage_scheduler::next() {
  MERAK_CHECK(!busy_, "next() while an op is running");
  bool f = f_eligible(), b = b_eligible();
  std::optional<op> pick;
  bool prefer_f = policy_.forward_first || last_was_backward_;
  if (f && (prefer_f || !b))
    pick = op{
        policy_.pre.count(forwarded_) || policy_.recompute_in_backward ? op_kind::Fpc : op_kind::F,
        forwarded_};
  else if (b)
    pick = op{op_kind::B, backwarded_};
  else if (r_eligible())
    pick = op{op_kind::R, backwarded_};
  else if (w_eligible())
    pick = op{op_kind::W, weighted_};  // fills what would be a wait
  if (pick) busy_ = true;
  return pick;
}

void stage_scheduler::completed(const op& o) {
  MERAK_CHECK(busy_, "completed() without a running op");
  busy_ = false;
  switch (o.kind) {
    case op_kind::F:
    case op_kind::Fpc:
      MERAK_CHECK(o.mb == forwarded_, "forward of micro-batch {} out of order", o.mb);
      ++forwarded_;
      max_in_flight_ = std::max(max_in_flight_, in_flight());
      last_was_backward_ = false;
      break;
    case op_kind::R:
      recomputed_[o.mb] = true;
      last_was_backward_ = false;
      break;
    case op_kind::B:
      MERAK_CHECK(o.mb == backwarded_, "backward of micro-batch {} out of order", o.mb);
      ++backwarded_;
      any_backward_ = true;
      last_was_backward_ = true;
      break;
    case op_kind::W:
      MERAK_CHECK(o.mb == weighted_, "weight gradient of micro-batch {} out of order", o.mb);
      ++weighted_;
      break;
  }
}

bool stage_scheduler::done() const {
  return backwarded_ == policy_.micro_batches &&
         (!policy_.split_weight || weighted_ == policy_.micro_batches);
}

std::vector<op> reference_order(schedule_kind kind, int p, int m, int s) {
  if (kind == schedule_kind::zb_h1) fail("no reference order for zb-h1");
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
