#pragma once
// A test case's layout for the stage actors: the dp x tp x pp shape,
// micro-batches, schedule and chunks; every other option at its default
// (callers set what their case varies).

#include "actors/parallel_trainer.hpp"

namespace merak::test {

inline actors::parallel_options parallel_layout(int dp, int tp, int pp, int micro_batches,
                                                partition::schedule_kind kind, int chunks) {
  actors::parallel_options par;
  par.dp = dp;
  par.tp = tp;
  par.pp = pp;
  par.micro_batches = micro_batches;
  par.schedule = kind;
  par.chunks = chunks;
  return par;
}

}  // namespace merak::test
