// `merak report RUN_DIR [--output FILE]`: the run's page (apps/report.hpp).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <filesystem>
#include <memory>

#include "apps/commands.hpp"
#include "apps/report.hpp"
#include "core/error.hpp"
#include "core/files.hpp"

namespace merak::apps {

action add_report_command(CLI::App& parent) {
  struct flags {
    std::string dir, output;
  };
  auto f = std::make_shared<flags>();
  auto* c = parent.add_subcommand(
      "report",
      "Write one self-contained HTML page about a training run: loss, validation loss, tokens/s, "
      "gradient norm, the pipeline timeline of its trace and its flags");
  c->add_option("dir", f->dir,
                "The run's directory: its --metrics file (metrics.jsonl), and trace.json and "
                "config.toml when there")
      ->required();
  c->add_option("--output,-o", f->output, "The page (default: DIR/report.html)");
  return [f] {
    const run_files run = read_run_dir(f->dir);
    const std::string out =
        f->output.empty() ? (std::filesystem::path(f->dir) / "report.html").string() : f->output;
    write_file_atomic(out, render_report(run));
    std::printf("%s: %zu steps%s%s\n", out.c_str(), run.lines.size(),
                run.trace.is_null() ? "" : ", pipeline timeline",
                run.config.empty() ? "" : ", flags");
    return 0;
  };
}

}  // namespace merak::apps
