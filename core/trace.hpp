#pragma once
// Timed slices of a training step, for its Chrome trace (--trace): each
// actor, reducer and TP group records what it ran and when.

#include <chrono>
#include <string>
#include <vector>

namespace merak {

// Seconds on the steady clock, comparable across every thread of a process.
inline double trace_now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// One op, sum or reduction: its name ("F3", "allreduce0", "tp-allreduce")
// and its start and end in trace_now() seconds.
struct trace_slice {
  std::string name;
  double start = 0, end = 0;
};

using trace_track = std::vector<trace_slice>;

}  // namespace merak
