#pragma once
// Message vocabulary of the training actors (CAF 0.17). Included only by
// actors/*.cpp.
//
// Tensors travel as tensor_ref: a shared handle, so moving one between actors
// of a process never copies the data. Its inspect() writes the shape, the
// element type and the bytes as one block, ready for crossing processes.

#include <caf/all.hpp>

#include <chrono>
#include <cstring>
#include <memory>
#include <vector>

#include "model/sharded_checkpoint.hpp"
#include "model/tensor.hpp"

namespace merak::model {

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, shard_spec& x) {
  return f(caf::meta::type_name("merak.shard_spec"), x.dim, x.parts, x.index, x.groups, x.full);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, shard_record& x) {
  return f(caf::meta::type_name("merak.shard_record"), x.file, x.name, x.spec, x.full);
}

}  // namespace merak::model

namespace merak::actors {

struct tensor_ref {
  std::shared_ptr<model::tensor> t;
  static tensor_ref make(model::tensor&& x) {
    return {std::make_shared<model::tensor>(std::move(x))};
  }
  // Takes the tensor out if this is the only handle, else copies it.
  model::tensor take() const {
    if (t.use_count() == 1) return std::move(*t);
    return t->clone();
  }
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, tensor_ref& x) {
  std::vector<int64_t> shape;
  uint8_t type = 0;
  std::vector<char> bytes;
  if (x.t) {
    shape = x.t->shape();
    type = uint8_t(x.t->type());
    if (Inspector::reads_state)
      bytes.assign(reinterpret_cast<const char*>(x.t->raw()),
                   reinterpret_cast<const char*>(x.t->raw()) + x.t->bytes());
  }
  auto load = caf::meta::load_callback([&]() -> caf::error {
    auto t = std::make_shared<model::tensor>(shape, model::dtype(type));
    if (bytes.size() != t->bytes()) return caf::sec::invalid_argument;
    if (!bytes.empty()) std::memcpy(t->raw(), bytes.data(), bytes.size());
    x.t = std::move(t);
    return caf::none;
  });
  return f(caf::meta::type_name("merak.tensor_ref"), shape, type, bytes, load);
}

// Trace timestamps: seconds on the steady clock, shared by every thread of
// the process (the coordinator subtracts its step start).
inline double trace_now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The kinds of tensor a stage hands on (tensor channel labels).
constexpr int kinput = 0;
constexpr int kgrad = 1;
constexpr int keval = 2;  // an input of a validation forward

// Stage inputs and gradients.
using step_atom = caf::atom_constant<caf::atom("step")>;    // (step)
using input_atom = caf::atom_constant<caf::atom("input")>;  // (mb, value, tensor)
using grad_atom = caf::atom_constant<caf::atom("grad")>;    // (mb, value, tensor)
using op_atom = caf::atom_constant<caf::atom("op")>;        // (kind, mb): TP leader -> followers
using run_atom = caf::atom_constant<caf::atom("run")>;      // () to self: pick the next op
using tie_atom = caf::atom_constant<caf::atom("tie")>;      // (name, tensor): tied-weight gradient
// (bucket, flat gradients, rows, cols, known rows): stage -> reducer
using reduce_atom = caf::atom_constant<caf::atom("reduce")>;
// (bucket, flat summed gradients, bytes, union rows, rel error, slice)
using reduced_atom = caf::atom_constant<caf::atom("reduced")>;
using apply_atom = caf::atom_constant<caf::atom("apply")>;  // (lr, clip factor)
using wire_atom =
    caf::atom_constant<caf::atom("wire")>;  // (stages of my replica, reducer, coordinator)
// Validation on the stage actors of replica 0 (forward only):
// coordinator/upstream --eval(seq, value, tensor)--> stage, run in seq order;
// the loss stage (TP shard 0) --evaluated(seq, loss)--> coordinator
using eval_atom = caf::atom_constant<caf::atom("eval")>;
using evaluated_atom = caf::atom_constant<caf::atom("evaluated")>;
// (assembly directory, metadata) -> stage of replica 0 writes its shard file;
// answers (saved, dp, stage, tp, records, adam t) or failed
using save_atom = caf::atom_constant<caf::atom("save")>;
using saved_atom = caf::atom_constant<caf::atom("saved")>;
// (checkpoint directory): the stage loads its part (either format); answers
// (restored, dp, stage, tp) or failed
using restore_atom = caf::atom_constant<caf::atom("restore")>;
using restored_atom = caf::atom_constant<caf::atom("restored")>;
// To the coordinator.
using loss_atom = caf::atom_constant<caf::atom("loss")>;  // (dp, mb, loss)
// (dp, stage, tp, sum of squares, busy s, bytes, union rows, sparse rel error)
using ready_atom = caf::atom_constant<caf::atom("ready")>;
using applied_atom = caf::atom_constant<caf::atom("applied")>;  // (dp, stage)
using failed_atom = caf::atom_constant<caf::atom("failed")>;    // (what)
using trace_atom =
    caf::atom_constant<caf::atom("trace")>;  // (dp, stage, tp, ops, reducer ops, TP sums) as text
// Scheduler negotiation.
using memory_atom = caf::atom_constant<caf::atom("memory")>;  // stage -> scheduler: memory report
using plan_atom = caf::atom_constant<caf::atom("plan")>;  // scheduler -> stage: policy, checkpoint
using planned_atom = caf::atom_constant<caf::atom("planned")>;  // scheduler -> coordinator: summary
// Between the processes of one job (process_mesh.hpp, parallel_trainer.cpp).
// (rank, actors, reducers, home): a process joins the job's network
using join_atom = caf::atom_constant<caf::atom("join")>;
// coordinator -> every other process, after each step: (step, loss, lr,
// grad norm, step s, bubble, dp bytes, union rows, sparse rel error)
using stepped_atom = caf::atom_constant<caf::atom("stepped")>;
using validated_atom = caf::atom_constant<caf::atom("validated")>;  // (loss): coordinator -> others
using finish_atom =
    caf::atom_constant<caf::atom("finish")>;  // (): the job ends, coordinator -> others
// Heartbeats between the processes' watchdogs (watchdog.hpp).
using ping_atom = caf::atom_constant<caf::atom("ping")>;  // () -> pong
using pong_atom = caf::atom_constant<caf::atom("pong")>;
using watch_atom = caf::atom_constant<caf::atom("watch")>;  // (peers, names, period ms, limit ms)
using tick_atom = caf::atom_constant<caf::atom("tick")>;    // () to self

}  // namespace merak::actors
