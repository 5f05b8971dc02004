#include "partition/placement.hpp"

#include <charconv>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.hpp"

namespace merak::partition {

std::string actor_coordinate::str() const {
  return fmt::format("dp={}, pp={}, tp={}", replica, stage, shard);
}

std::vector<int> placement::actors_of(int r) const {
  std::vector<int> out;
  for (int i = 0; i < actors(); ++i)
    if (rank_of[size_t(i)] == r) out.push_back(i);
  return out;
}

bool placement::single_process() const {
  for (int r : rank_of)
    if (r != rank_of.front()) return false;
  return true;
}

bool placement::replica_on(int d, int r) const {
  for (int s = 0; s < pp; ++s)
    for (int t = 0; t < tp; ++t)
      if (rank(d, s, t) != r) return false;
  return true;
}

std::string placement::str() const {
  return fmt::format("{}", fmt::join(rank_of, ","));
}

namespace {

void check_layout(int dp, int pp, int tp, int world) {
  if (dp < 1 || pp < 1 || tp < 1) fail("layout dp={} pp={} tp={} has no actors", dp, pp, tp);
  if (world < 1) fail("a job needs at least one process (got {})", world);
  if (world > dp * pp * tp)
    fail(
        "{} processes but the layout dp={} x pp={} x tp={} has only {} actors: every process "
        "must host at least one (raise --dp, --pp or --tp, or start fewer processes)",
        world, dp, pp, tp, dp * pp * tp);
}

// Members' ranks of one group, and whether they are spread as allowed.
group_spread spread_of(const std::vector<int>& ranks, const std::string& what) {
  std::set<int> distinct(ranks.begin(), ranks.end());
  if (distinct.size() == 1) return group_spread::one_process;
  if (distinct.size() == ranks.size()) return group_spread::one_per_process;
  fail(
      "placement puts the {} on processes [{}]: a group must be on one process or have one "
      "member per process",
      what, fmt::join(ranks, ", "));
}

}  // namespace

placement default_placement(int dp, int pp, int tp, int world) {
  check_layout(dp, pp, tp, world);
  placement p{dp, pp, tp, world, {}};
  const int n = p.actors();
  // Actor i goes to process floor(i * world / n): contiguous blocks whose
  // sizes differ by at most one.
  for (int i = 0; i < n; ++i) p.rank_of.push_back(int(int64_t(i) * world / n));
  return p;
}

placement with_chunks(const placement& devices, int chunks) {
  MERAK_CHECK(chunks >= 1, "{} chunks per device", chunks);
  placement p{devices.dp, devices.pp * chunks, devices.tp, devices.world, {}};
  for (int d = 0; d < p.dp; ++d)
    for (int s = 0; s < p.pp; ++s)
      for (int t = 0; t < p.tp; ++t) p.rank_of.push_back(devices.rank(d, s % devices.pp, t));
  return p;
}

placement parse_placement(const std::string& text, int dp, int pp, int tp, int world) {
  check_layout(dp, pp, tp, world);
  placement p{dp, pp, tp, world, {}};
  std::string_view rest = text;
  while (true) {
    auto comma = rest.find(',');
    std::string_view item = rest.substr(0, comma);
    int r = -1;
    auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), r);
    if (item.empty() || ec != std::errc() || end != item.data() + item.size() || r < 0 ||
        r >= world)
      fail("--placement entry {} ('{}') is not a process rank in [0, {})", p.rank_of.size() + 1,
           item, world);
    p.rank_of.push_back(r);
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  if (int(p.rank_of.size()) != p.actors())
    fail(
        "--placement lists {} ranks but the layout dp={} x pp={} x tp={} has {} actors (one rank "
        "per actor, TP rank fastest, then stage, then replica)",
        p.rank_of.size(), dp, pp, tp, p.actors());
  for (int r = 0; r < world; ++r)
    if (p.actors_of(r).empty()) fail("--placement gives process {} no actor", r);
  return p;
}

group_spread tp_group_spread(const placement& p, int d, int s) {
  std::vector<int> ranks;
  for (int t = 0; t < p.tp; ++t) ranks.push_back(p.rank(d, s, t));
  return spread_of(ranks, fmt::format("TP shards of replica {} stage {}", d, s));
}

group_spread dp_group_spread(const placement& p, int s, int t) {
  std::vector<int> ranks;
  for (int d = 0; d < p.dp; ++d) ranks.push_back(p.rank(d, s, t));
  return spread_of(ranks, fmt::format("replicas of stage {} shard {}", s, t));
}

void validate_placement(const placement& p) {
  MERAK_CHECK(int(p.rank_of.size()) == p.actors(), "placement of {} actors for {}",
              p.rank_of.size(), p.actors());
  for (int d = 0; d < p.dp; ++d)
    for (int s = 0; s < p.pp; ++s) tp_group_spread(p, d, s);
  for (int s = 0; s < p.pp; ++s)
    for (int t = 0; t < p.tp; ++t) dp_group_spread(p, s, t);
}

int derive_dp(int world, int pp, int tp) {
  if (world > pp * tp && world % (pp * tp) == 0) return world / (pp * tp);
  return 1;
}

}  // namespace merak::partition
