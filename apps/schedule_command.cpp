// `merak schedule show`: the per-stage op order a schedule produces when every
// op of a kind costs the same (the event simulator runs the same policies as
// the stage actors).
#include <CLI/CLI.hpp>

#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>

#include "apps/commands.hpp"
#include "core/error.hpp"
#include "partition/simulator.hpp"

namespace merak::apps {
namespace {

struct schedule_flags {
  int pp = 4;
  int micro_batches = 8;
  std::string schedule = "1f1b";
  bool full_recompute = false;
  double t_f = 1, t_b = 2, t_r = 1, t_w = 1;
  int chunks = 2;
  bool stats = false;
};

// Refuses a shape or cost the simulator cannot take, naming the flag: the
// stages and micro-batches are bounded (the simulator holds every op), the
// costs finite.
void check_show_flags(const schedule_flags& f) {
  if (f.pp < 1 || f.pp > 1024) fail("--pp must be from 1 to 1024 (got {})", f.pp);
  if (f.micro_batches < 1 || f.micro_batches > 65536)
    fail("--micro-batches must be from 1 to 65536 (got {})", f.micro_batches);
  if (f.chunks < 1 || f.chunks > 64) fail("--chunks must be from 1 to 64 (got {})", f.chunks);
  const std::pair<const char*, double> costs[] = {
      {"--t-f", f.t_f}, {"--t-b", f.t_b}, {"--t-r", f.t_r}, {"--t-w", f.t_w}};
  for (const auto& [flag, cost] : costs)
    if (!(std::isfinite(cost) && cost >= 0 && cost <= 1e12))
      fail("{} must be a finite cost from 0 to 1e12 (got {})", flag, cost);
  if (!(f.t_f > 0 && f.t_b > 0))
    fail("--t-f and --t-b must be positive (got {} and {})", f.t_f, f.t_b);
}

int run_show(const schedule_flags& f) {
  using namespace partition;
  check_show_flags(f);
  auto kind = parse_schedule(f.schedule);
  if (!(f.t_w >= 0 && f.t_w <= f.t_b))
    fail("--t-w must be from 0 to --t-b {} (got {})", f.t_b, f.t_w);
  // zb-h1 splits the backward: B is its input gradient, W the rest.
  const bool split = kind == schedule_kind::zb_h1;
  // Interleaved: each chunk holds 1/chunks of a stage's layers.
  const double per = kind == schedule_kind::interleaved ? 1.0 / f.chunks : 1.0;
  auto tr = simulate_pipeline(
      make_policies(kind, f.pp, f.micro_batches, f.full_recompute, f.chunks),
      uniform_costs(f.t_f * per, (split ? f.t_b - f.t_w : f.t_b) * per, f.t_r * per, f.t_w * per),
      [](int, int, int) { return 0.0; });
  for (int s = 0; s < f.pp; ++s) {
    std::printf("s%d:", s);
    for (auto& o : tr.order(s)) std::printf(" %s", op_name(o).c_str());
    std::printf("\n");
  }
  if (f.stats)
    std::printf("makespan %.3g, bubble %.1f%%\n", tr.makespan, 100.0 * tr.bubble_fraction());
  return 0;
}

}  // namespace

action add_schedule_command(CLI::App& parent) {
  auto f = std::make_shared<schedule_flags>();
  auto* c = parent.add_subcommand("schedule", "Pipeline schedules");
  c->require_subcommand(1);
  auto* show = c->add_subcommand(
      "show", "Print each stage's op order (F, Fpc, R, B, W) for uniform op costs");
  show->add_option("--pp", f->pp, "Pipeline stages")->capture_default_str();
  show->add_option("--micro-batches", f->micro_batches, "Micro-batches per step")
      ->capture_default_str();
  show->add_option("--schedule", f->schedule, "gpipe, 1f1b, shifted, zb-h1 or interleaved")
      ->capture_default_str();
  show->add_option("--chunks", f->chunks,
                   "interleaved: model chunks per device (op costs are per chunk: 1/chunks of a "
                   "stage's)")
      ->capture_default_str();
  show->add_flag("--full-recompute", f->full_recompute,
                 "Every stage but the last recomputes in backward");
  show->add_option("--t-f", f->t_f, "Cost of a forward")->capture_default_str();
  show->add_option("--t-b", f->t_b, "Cost of a backward")->capture_default_str();
  show->add_option("--t-r", f->t_r, "Cost of a recomputation")->capture_default_str();
  show->add_option("--t-w", f->t_w,
                   "Of the backward's cost, the weight gradient (zb-h1 runs it as W, later)")
      ->capture_default_str();
  show->add_flag("--stats", f->stats, "Also print the makespan and bubble fraction");
  return [f] { return run_show(*f); };
}

}  // namespace merak::apps
