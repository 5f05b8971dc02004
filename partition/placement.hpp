#pragma once
// Placement: which process of a job hosts each actor of a dp x pp x tp
// layout (docs/placement.md).
//
// Actors are numbered in layout order, TP rank fastest, then stage, then
// replica: index(d, s, t) = (d * pp + s) * tp + t. The default placement
// hands out that order in contiguous blocks, so the TP shards of a stage sit
// on one process or on adjacent ranks, consecutive stages on adjacent ranks,
// and replicas last (blocks differ by at most one actor). From one process (every actor in it) to
// one actor per process (the GPU layout) and anything between.
//
// Groups that talk through comm/ (the TP shards of one stage, the replicas
// of one (stage, shard)) must be either wholly inside one process (the
// in-process transport) or one member per process (UCX between the
// processes); a group split unevenly is refused, naming it.

#include <string>
#include <vector>

namespace merak::partition {

// Where an actor sits in the layout: its replica (data-parallel rank),
// pipeline stage and TP rank.
struct actor_coordinate {
  int replica = 0, stage = 0, shard = 0;
  bool operator==(const actor_coordinate&) const = default;
  // "dp=1, pp=0, tp=1", as logs and errors name an actor.
  std::string str() const;
};

struct placement {
  int dp = 1, pp = 1, tp = 1;
  int world = 1;             // processes
  std::vector<int> rank_of;  // [index(d, s, t)] -> process rank

  int index(int d, int s, int t) const { return (d * pp + s) * tp + t; }
  int index(const actor_coordinate& c) const { return index(c.replica, c.stage, c.shard); }
  // The inverse of index: the actor with layout index `i` (0 <= i < actors()).
  actor_coordinate coordinate(int i) const { return {i / (pp * tp), i / tp % pp, i % tp}; }
  int rank(int d, int s, int t) const { return rank_of[size_t(index(d, s, t))]; }
  int actors() const { return dp * pp * tp; }
  // The actors process `r` hosts, as layout indices in increasing order.
  std::vector<int> actors_of(int r) const;
  // Every actor on one process.
  bool single_process() const;
  // Every stage of replica `d` on process `r`.
  bool replica_on(int d, int r) const;
  // "0,0,1,1" (rank_of, comma-separated): the form --placement takes.
  std::string str() const;
};

// How the members of a comm/ group are spread.
enum class group_spread { one_process, one_per_process };

// Contiguous blocks in layout order (see above). Throws merak::error when
// the world has more processes than the layout has actors.
placement default_placement(int dp, int pp, int tp, int world);

// The placement of an interleaved layout's actors (`chunks` model chunks per
// pipeline device; its pp counts virtual stages, pp x chunks) from the
// placement of its devices: virtual stage c x pp + s goes where stage s of
// `devices` is, so a device's chunks share its process.
placement with_chunks(const placement& devices, int chunks);

// `text` lists one rank per actor in layout order ("0,1,0,1"). Throws
// merak::error naming the entry when it is not a rank of the world, the
// count when it does not match, or a process that would host nothing.
placement parse_placement(const std::string& text, int dp, int pp, int tp, int world);

// Checks every TP and data-parallel group (see above); throws merak::error
// naming the group and where its members are.
void validate_placement(const placement& p);

// The spread of the TP group of (d, s) and of the replica group of (s, t).
group_spread tp_group_spread(const placement& p, int d, int s);
group_spread dp_group_spread(const placement& p, int s, int t);

// --dp when the user gave none: one actor per process when the world
// divides into pp x tp, else 1 (several actors per process).
int derive_dp(int world, int pp, int tp);

}  // namespace merak::partition
