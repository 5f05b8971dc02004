// merak train drives either trainer through model::training_job: the
// factory picks by the options, and both give the same run.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <array>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>

#include "actors/parallel_trainer.hpp"
#include "model/trainer.hpp"
#include "tests/model/test_util.hpp"

using namespace merak;

namespace {

struct text_file {
  std::string path = (std::filesystem::temp_directory_path() /
                      ("merak_job_test_" + std::to_string(::getpid()) + ".txt"))
                         .string();
  text_file() {
    auto bytes = test::small_text(4000);
    std::ofstream(path, std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  }
  ~text_file() { std::filesystem::remove(path); }
};

model::train_options tiny(const std::string& data, int64_t steps) {
  model::train_options o;
  o.data = data;
  o.model = {.vocab = 256, .max_seq = 16, .layers = 2, .dim = 32, .heads = 4};
  o.batch = 8;
  o.steps = steps;
  o.seed = 5;
  return o;
}

std::vector<double> run(model::training_job& job) {
  std::vector<double> losses;
  while (!job.done()) losses.push_back(job.train_step().loss);
  return losses;
}

}  // namespace

TEST_CASE("the training job is the single-device trainer unless the options need actors",
          "[actors][job]") {
  text_file f;
  actors::parallel_options one;
  CHECK_FALSE(one.needs_actors());
  auto single = actors::make_training_job(tiny(f.path, 3), one);
  CHECK(dynamic_cast<model::trainer*>(single.get()) != nullptr);
  const auto reference = run(*single);
  {  // one device: the bytes it holds, no pipeline or data-parallel figures
    std::map<std::string, double> m;
    for (auto& [name, value] : single->step_metrics()) m[name] = value;
    CHECK(m.size() == 5);
    CHECK(m["memory_bytes/parameters"] > 0);
    CHECK(m["memory_bytes/gradients"] == m["memory_bytes/parameters"]);
    CHECK(m["memory_bytes/gradients_peak"] == m["memory_bytes/gradients"]);
    CHECK(m["memory_bytes/optimizer"] == 2 * m["memory_bytes/parameters"]);
    CHECK(m["memory_bytes/activations_peak"] > 0);
  }

  for (auto layout : {std::array<int, 4>{1, 2, 1, 2}, std::array<int, 4>{2, 1, 1, 1},
                      std::array<int, 4>{1, 1, 2, 1}}) {
    actors::parallel_options par;
    par.dp = layout[0], par.pp = layout[1], par.tp = layout[2], par.micro_batches = layout[3];
    REQUIRE(par.needs_actors());
    auto job = actors::make_training_job(tiny(f.path, 3), par);
    CHECK(dynamic_cast<actors::parallel_trainer*>(job.get()) != nullptr);
    CHECK(job->writes_outputs());
    auto losses = run(*job);
    REQUIRE(losses.size() == reference.size());
    for (size_t i = 0; i < losses.size(); ++i)
      CHECK(std::abs(losses[i] - reference[i]) <= 1e-5 * std::abs(reference[i]));
    auto metrics = job->step_metrics();
    REQUIRE(!metrics.empty());
    CHECK(metrics.front().first == "bubble");
    bool has_bytes = false;
    for (auto& [name, v] : metrics) has_bytes = has_bytes || name == "dp_bytes_per_rank";
    CHECK(has_bytes == (par.dp > 1));
  }
  // Recomputation alone also runs on the actors.
  actors::parallel_options rc;
  rc.recompute = actors::recompute_mode::full;
  CHECK(rc.needs_actors());
}

TEST_CASE("a checkpoint is due every save interval and at the end, for either trainer",
          "[actors][job]") {
  text_file f;
  for (int pp : {1, 2}) {
    auto o = tiny(f.path, 5);
    o.save_dir = "unused";
    o.save_interval = 2;
    actors::parallel_options par;
    par.pp = pp;
    auto job = actors::make_training_job(o, par);
    std::vector<int64_t> due;
    while (!job->done()) {
      job->train_step();
      if (job->checkpoint_due()) due.push_back(job->step());
    }
    CHECK(due == std::vector<int64_t>{2, 4, 5});
  }
  auto o = tiny(f.path, 2);  // no save directory: never due
  auto job = actors::make_training_job(o, {});
  job->train_step();
  job->train_step();
  CHECK_FALSE(job->checkpoint_due());
}
