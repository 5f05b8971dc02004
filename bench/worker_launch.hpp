#pragma once
// Benchmarks that measure between real processes start copies of this
// program as the ranks of one job (the local launcher). A launched copy sees
// MERAK_BENCH_WORKER set and measures; rank 0 writes its JSON result to the
// file MERAK_BENCH_OUT names, which the launching copy reads back.

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "job/launcher.hpp"

namespace merak::bench {

// This process's command line, argv[0] made an absolute path (the workers'
// command). Throws merak::error naming `what`.
std::vector<std::string> own_argv(const std::string& what);

// Starts `lo` (procs, argv, timeouts set by the caller) with MERAK_BENCH_OUT
// naming a fresh temporary file, and returns the JSON line rank 0 wrote
// there. Throws merak::error naming `what` when a rank fails or wrote nothing.
nlohmann::json launch_for_result(job::launch_options lo, const std::string& what);

}  // namespace merak::bench
