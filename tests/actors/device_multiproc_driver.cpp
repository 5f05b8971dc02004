// Stage actors on the stand-in device (tests/model/stand_in_device.hpp) in
// a job of several real processes: the path a GPU job takes between
// processes, checked without a GPU. Each worker registers the stand-in
// device, its collectives and its links (tests/comm/stand_in_*.hpp), puts
// its actors on cuda:0 and trains the layout; the activations and
// gradients between processes then cross the tensor channel's device
// links, the TP and data-parallel groups' tensors the device collectives.
//
//   merak_device_multiproc <case> <procs>   launches <procs> workers of itself
//
// Cases: pp2 (pp 2, four micro-batches, 1F1B; 2 processes), dp2pp2 (dp 2 x
// pp 2 under the distributed optimizer, shifted; 4 processes). Every step's
// loss must equal the same layout on the CPU in one process bit for bit,
// every worker must have sent tensors over its links, and with dp > 1
// reduced its buckets through the device collectives. Exits 0 when it did,
// else 1.
#include <cstdlib>
#include <iostream>
#include <string>
#include <thread>

#include <fmt/format.h>

#include "actors/parallel_trainer.hpp"
#include "core/error.hpp"
#include "job/bootstrap.hpp"
#include "job/launcher.hpp"
#include "tests/actors/layout_options.hpp"
#include "tests/comm/stand_in_collectives.hpp"
#include "tests/comm/stand_in_links.hpp"
#include "tests/model/stand_in_device.hpp"
#include "tests/model/test_util.hpp"

using namespace merak;
using namespace std::chrono_literals;

namespace {

constexpr int64_t ksteps = 4;

actors::parallel_options layout_of(const std::string& name) {
  using partition::schedule_kind;
  auto par = name == "pp2" ? test::parallel_layout(1, 1, 2, 4, schedule_kind::one_f_one_b, 1)
                           : test::parallel_layout(2, 1, 2, 2, schedule_kind::shifted, 1);
  if (name != "pp2") par.sharding = partition::sharding_strategy::optim;
  par.lend_cores = false;  // the same thread counts in both runs
  par.bucket_bytes = 8192;
  par.timeout_s = 60;
  return par;
}

int worker(const std::string& name) {
  test::register_stand_in_device();
  test::register_stand_in_collectives();
  test::register_stand_in_links();
  job::bootstrap_options bo;
  bo.timeout = 60000ms;
  std::shared_ptr<job::bootstrap> processes = job::connect_bootstrap(job::resolve_bootstrap(bo));
  const int rank = processes->rank();
  auto o = test::layout_test_options(ksteps);
  std::vector<double> reference;
  if (rank == 0) {  // the same layout on the CPU, in this process alone
    auto ip = layout_of(name);
    // A thread a stage, as the job below gives its processes on a host of
    // as many cores (and on a larger host, the same share of its cores).
    ip.threads = ip.dp * ip.pp * std::max(1, int(std::thread::hardware_concurrency()) /
                                                 (ip.dp * ip.pp));
    actors::parallel_trainer cpu(o, ip, test::layout_test_corpus());
    while (!cpu.done()) reference.push_back(cpu.train_step().loss);
  }
  auto par = layout_of(name);
  par.processes = processes;  // threads: the host's cores split between the processes
  o.where = model::device::cuda(0);
  actors::parallel_trainer dev(o, par, test::layout_test_corpus());
  std::vector<double> losses;
  while (!dev.done()) losses.push_back(dev.train_step().loss);
  bool ok = test::stand_in_link_sends() > 0;
  if (!ok) std::cerr << "rank " << rank << ": no tensor crossed a device link\n";
  if (par.dp > 1 && test::stand_in_collective_calls() == 0) {
    std::cerr << "rank " << rank << ": no gradient bucket went through the device collectives\n";
    ok = false;
  }
  if (rank == 0)
    for (size_t k = 0; k < reference.size(); ++k)
      if (k >= losses.size() || losses[k] != reference[k]) {
        std::cerr << fmt::format("step {}: {} on the stand-in over processes, {} on the CPU\n",
                                 k + 1, k < losses.size() ? losses[k] : -1.0, reference[k]);
        ok = false;
      }
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (const char* s = std::getenv("MERAK_DEVICE_WORKER")) return worker(s);
    if (argc != 3) {
      std::cerr << "usage: " << argv[0] << " pp2|dp2pp2 <procs>\n";
      return 2;
    }
    job::launch_options lo;
    lo.procs = std::atoi(argv[2]);
    lo.argv = {job::self_executable()};
    lo.env["MERAK_DEVICE_WORKER"] = argv[1];
    lo.grace = 20000ms;
    lo.timeout = 240000ms;
    auto res = job::launch_local(lo);
    std::cout << argv[1] << " over " << lo.procs
              << " processes: " << (res.ok() ? "every rank passed" : res.message) << "\n";
    return res.ok() ? 0 : 1;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}
