#include "actors/messages.hpp"

namespace merak::actors {

void add_message_types(caf::actor_system_config& cfg) {
#define MERAK_MESSAGE(T) cfg.add_message_type<T>("merak." #T)
  MERAK_MESSAGE(tensor_ref);
  MERAK_MESSAGE(stage_wiring);
  MERAK_MESSAGE(stage_plan);
  MERAK_MESSAGE(step_start);
  MERAK_MESSAGE(stage_tensor);
  MERAK_MESSAGE(pump_next);
  MERAK_MESSAGE(tp_command);
  MERAK_MESSAGE(chunk_ready);
  MERAK_MESSAGE(chunk_command);
  MERAK_MESSAGE(chunk_done);
  MERAK_MESSAGE(tied_gradient);
  MERAK_MESSAGE(bucket_reduced);
  MERAK_MESSAGE(bucket_gathered);
  MERAK_MESSAGE(apply_update);
  MERAK_MESSAGE(save_shard);
  MERAK_MESSAGE(restore_shard);
  MERAK_MESSAGE(reduce_bucket);
  MERAK_MESSAGE(gather_bucket);
  MERAK_MESSAGE(scheduler_wiring);
  MERAK_MESSAGE(memory_report);
  MERAK_MESSAGE(micro_batch_loss);
  MERAK_MESSAGE(stage_ready);
  MERAK_MESSAGE(stage_trace);
  MERAK_MESSAGE(stage_applied);
  MERAK_MESSAGE(eval_loss);
  MERAK_MESSAGE(shard_saved);
  MERAK_MESSAGE(shard_restored);
  MERAK_MESSAGE(plan_ready);
  MERAK_MESSAGE(job_failed);
  MERAK_MESSAGE(join_job);
  MERAK_MESSAGE(step_done);
  MERAK_MESSAGE(validation_done);
  MERAK_MESSAGE(resume_at);
  MERAK_MESSAGE(job_finished);
  MERAK_MESSAGE(ping);
  MERAK_MESSAGE(pong);
  MERAK_MESSAGE(watch_peers);
  MERAK_MESSAGE(watch_tick);
#undef MERAK_MESSAGE
}

}  // namespace merak::actors
