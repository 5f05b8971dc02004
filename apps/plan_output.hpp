#pragma once
// Printing plans (shared by `merak plan` and `merak train --devices`).

#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

#include "partition/planner.hpp"

namespace merak::apps {

nlohmann::json plan_json(const partition::plan& p);
nlohmann::json plan_json(const partition::plan_request& r, const partition::plan_result& res);
void print_plan(const partition::plan_request& r, const partition::plan_result& res, FILE* out);
// Where the plan's step time goes: the FLOP count and TFLOP/s per device,
// communication on the cluster's links, and the critical path.
void explain_plan(const partition::plan_request& r, const partition::plan& p, FILE* out);

}  // namespace merak::apps
