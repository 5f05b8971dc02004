#pragma once
// The one call between a single-device model and a parallel run: given the
// training options (model shape, global batch) and a device count, the
// planner (partition/planner.hpp) chooses dp x tp x pp, micro-batches,
// schedule, recomputation and TP overlap, and the result is the
// parallel_options that parallel_trainer runs. The same choice as
// `merak train --devices N`.
//
// This header includes no CAF.

#include <string>

#include "actors/parallel_trainer.hpp"
#include "model/trainer.hpp"
#include "partition/planner.hpp"

namespace merak::actors {

struct device_plan {
  parallel_options options;       // what parallel_trainer runs
  partition::plan_result search;  // the chosen plan, runners-up, rejected rules (empty on
                                  // the other processes of a job: process 0 plans)
};

// Plans `opts.model` at global batch `opts.batch` for `devices` actor
// devices sharing this machine's cores (base.threads of them, or all). The
// other fields of `base` (threads, timeout, trace, bucket size, codecs, a
// memory budget) are kept. The CPU profile behind the cost model is cached
// in `profile_cache` (by default where `merak plan` caches it; "": profile
// every time). Throws merak::error naming
// the rules when no plan fits.
//
// In a job of several processes (base.processes) this is a collective:
// process 0 plans for the job's cores (base.threads per process, the
// processes on one host) and its actors placed over the processes (the
// plan's placement), and every process gets its options, so all run the
// same layout. `devices` must be at least the number of processes.
device_plan plan_for_devices(const model::train_options& opts, int devices,
                             parallel_options base = {},
                             const std::string& profile_cache = partition::default_profile_cache());

}  // namespace merak::actors
