// embed_actor_system: a program with its own caf::actor_system runs a merak
// training job inside it. The job's stage actors (2 pipeline stages here)
// are spawned in the program's system, next to the program's own actor (a
// reporter that keeps the running mean of the losses it is sent); the
// calling thread is the job's coordinator. When the trainer goes away its
// actors end, and the program's actor and system live on.
//
// Usage: embed_actor_system CORPUS.txt [STEPS]

#include <caf/all.hpp>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include "actors/parallel_trainer.hpp"
#include "core/log.hpp"
#include "model/data.hpp"
#include "model/trainer.hpp"

namespace {

using loss_atom = caf::atom_constant<caf::atom("loss")>;
using mean_atom = caf::atom_constant<caf::atom("mean")>;

// The program's own actor: running mean of the losses it receives.
caf::behavior reporter(caf::stateful_actor<std::pair<double, int>>* self) {
  return {
      [=](loss_atom, double loss) {
        self->state.first += loss;
        self->state.second += 1;
      },
      [=](mean_atom) { return self->state.first / std::max(1, self->state.second); },
  };
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || argc > 3) {
    std::fprintf(stderr, "usage: %s CORPUS.txt [STEPS]\n", argv[0]);
    return 2;
  }
  const int steps = argc == 3 ? std::atoi(argv[2]) : 10;
  namespace ma = merak::actors;
  namespace mm = merak::model;
  try {
    merak::setup_logging("warn");
    // The program's actor system, configured for merak's messages.
    caf::actor_system_config cfg;
    ma::parallel_trainer::configure(cfg);
    cfg.set("logger.console", caf::atom("none"));
    caf::actor_system system{cfg};
    auto report = system.spawn(reporter);

    mm::train_options opts;
    opts.data = argv[1];
    opts.model = {.vocab = 256, .max_seq = 32, .layers = 2, .dim = 64, .heads = 2};
    opts.batch = 8;
    opts.steps = std::max(1, steps);
    ma::parallel_options par;
    par.pp = 2;
    par.micro_batches = 4;
    mm::text_corpus corpus(opts.data, opts.model.max_seq, opts.val_fraction, opts.tokens,
                           opts.model.vocab);
    {
      ma::parallel_trainer trainer(opts, par, std::move(corpus), system);
      caf::scoped_actor self{system};
      while (!trainer.done()) {
        const mm::step_result r = trainer.train_step();
        self->send(report, loss_atom::value, r.loss);
        std::printf("step %lld/%d loss %.4f\n", static_cast<long long>(r.step), opts.steps, r.loss);
      }
      std::printf("validation loss %.4f\n", trainer.validation_loss());
    }  // the job's actors end here; the system and `report` stay
    caf::scoped_actor self{system};
    self->request(report, caf::infinite, mean_atom::value)
        .receive(
            [](double mean) {
              std::printf("mean training loss %.4f (from the program's own actor)\n", mean);
            },
            [&](caf::error& e) { std::fprintf(stderr, "error: %s\n", system.render(e).c_str()); });
    self->send_exit(report, caf::exit_reason::user_shutdown);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "embed_actor_system: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
