// The device plumbing of the model code, checked without a GPU on the
// stand-in device (tests/model/stand_in_device.hpp): code that reads or
// writes a device tensor's data directly, instead of through copies
// (tensor::to, copy_bytes) or the backend, faults and the test dies; a run
// must equal the CPU run bit for bit. What the real CUDA backend computes
// is tests/gpu/backend_test.cpp's part.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>

#include "model/backend.hpp"
#include "model/checkpoint.hpp"
#include "model/trainer.hpp"
#include "tests/model/stand_in_device.hpp"
#include "tests/model/test_util.hpp"

using namespace merak;
using model::dtype;
using model::tensor;

namespace {

const model::device dev = model::device::cuda(0);

model::train_options tiny(dtype activations) {
  model::train_options o;
  o.model = {.vocab = 256, .max_seq = 16, .layers = 2, .dim = 32, .heads = 4};
  o.model.activations = activations;
  o.batch = 8;
  o.steps = 6;
  o.lr = 3e-3f;
  o.warmup = 2;
  o.seed = 5;
  return o;
}

model::text_corpus corpus() {
  return model::text_corpus(test::small_text(4000), 16, 0.1, "tiny");
}

}  // namespace

TEST_CASE("device tensors are unreadable from the host outside copies and the backend",
          "[device]") {
  tensor x = test::random_tensor({100}, 1);
  tensor d = x.to(dev);
  tensor back = d.to(model::device::cpu());
  CHECK(std::memcmp(back.raw(), x.raw(), x.bytes()) == 0);
  // The stand-in must catch a direct read, or the tests below prove nothing:
  // a child process that reads the data dies of SIGSEGV.
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    volatile float v = d.f32()[0];
    (void)v;
    ::_exit(0);
  }
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  CHECK(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGSEGV);
}

TEST_CASE("training on a device equals the CPU run bit for bit, and checkpoints cross",
          "[device]") {
  for (dtype A : {dtype::f32, dtype::bf16}) {
    INFO(model::dtype_name(A));
    auto dir = std::filesystem::temp_directory_path() /
               ("merak-device-" + std::to_string(::getpid()) + model::dtype_name(A));
    auto o = tiny(A);
    model::trainer on_cpu(o, corpus());
    auto od = o;
    od.where = dev;
    od.save_dir = dir.string();
    model::trainer on_dev(od, corpus());
    const long copies_before = test::stand_in_host_copies();
    for (int s = 0; s < 3; ++s) {
      auto a = on_cpu.train_step(), b = on_dev.train_step();
      REQUIRE(a.loss == b.loss);
      REQUIRE(a.grad_norm == b.grad_norm);
    }
    // The host saw batches go in and losses and norms come out, and nothing
    // else: a handful of copies per step, not one per tensor per op.
    CHECK(test::stand_in_host_copies() - copies_before < 3 * 40);
    CHECK(on_dev.validation_loss() == on_cpu.validation_loss());
    const std::string saved = on_dev.save();
    // The device run's checkpoint resumes on the CPU and on the device.
    auto resume = o;
    resume.load = saved;
    model::trainer cpu_again(resume, corpus());
    resume.where = dev;
    model::trainer dev_again(resume, corpus());
    for (int s = 3; s < 6; ++s) {
      auto a = on_cpu.train_step(), b = cpu_again.train_step(), c = dev_again.train_step();
      REQUIRE(a.loss == b.loss);
      REQUIRE(a.loss == c.loss);
    }
    std::filesystem::remove_all(dir);
  }
}

int main(int argc, char* argv[]) {
  test::register_stand_in_device();
  return Catch::Session().run(argc, argv);
}
