#pragma once
// `merak report RUN_DIR`: one self-contained HTML page about a training
// run, drawn as inline SVG (no script, no network): the loss and
// validation-loss curves, tokens/s, the gradient norm, the pipeline
// timeline of its trace per actor, and its resolved flags. docs/training.md.

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace merak::apps {

struct run_files {
  std::string dir;
  std::string metrics_path;           // a .jsonl of `merak train --metrics`
  std::vector<nlohmann::json> lines;  // its lines, in order
  std::string trace_path;             // `--trace` output, or ""
  nlohmann::json trace;               // its traceEvents, or null
  std::string config_path;            // config.toml of the run, or ""
  std::string config;                 // its text
};

// Finds a run's files in `dir`: the metrics (metrics.jsonl, else the only
// *.jsonl), trace.json, and the resolved flags (config.toml in the
// directory or one below it, or METRICS.config.toml). Throws merak::error
// naming the directory, file and line of what is missing or malformed.
run_files read_run_dir(const std::string& dir);

// The page. Each chart is an <svg> with an id (loss, throughput,
// grad-norm, timeline) whose data-* attributes and labels carry the run's
// numbers.
std::string render_report(const run_files& run);

}  // namespace merak::apps
