#pragma once
// The critical path of a simulated pipeline step (partition/planner.hpp's
// critical_path): the chain of ops and messages that ends the step.

#include "partition/planner.hpp"
#include "partition/simulator.hpp"

namespace merak::partition {

// Walked back from the op that ends last: each op started when the op
// before it on its stage ended, or when the message it waited for (an
// activation from the stage before, a gradient from the stage after)
// arrived.
critical_path walk_critical_path(const pipeline_trace& tr, const link_delay_fn& delay);

}  // namespace merak::partition
