#pragma once
// The TP group of one shard over a comm/ transport (model::tp_group): a
// comm_stream runs the sums in the order they were started, which is the
// same on every shard of a stage, so the shard's thread never blocks on a
// sum until it needs the result. Used by one thread (the shard's).
//
// Tensors on a device go to the device collectives registered for its kind
// (comm/device_collectives.hpp; NCCL with the CUDA module), made at the
// group's first device tensor over this group's transport; without any,
// through a host copy and the transport's rings. Every shard of a group
// keeps its tensors on devices of one kind, or all on the host.

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "comm/collectives.hpp"
#include "comm/device_collectives.hpp"
#include "comm/transport.hpp"
#include "core/trace.hpp"
#include "model/executor.hpp"

namespace merak::comm {

class stream_tp_group final : public model::tp_group {
 public:
  // `tracing`: record a slice per sum for take_trace().
  stream_tp_group(std::shared_ptr<transport> link, bool tracing);
  int size() const override { return link_->size(); }
  int rank() const override { return link_->rank(); }
  int start_allreduce(model::tensor& x) override;
  int start_reduce_scatter(model::tensor& x) override;
  int start_allgather(model::tensor& x) override;
  void wait(int ticket) override;
  // Slices of the sums run since the last call ("tp-allreduce").
  trace_track take_trace();

 private:
  enum class collective { allreduce, reduce_scatter, allgather };
  int start(model::tensor& x, collective what);

  std::shared_ptr<transport> link_;
  // Made and used on the stream's thread only (declared before stream_, so
  // that the thread has ended when they go).
  std::unique_ptr<device_collectives> device_;
  bool device_tried_ = false;
  comm_stream stream_;
  bool tracing_;
  uint64_t next_ = 0;
  std::map<int, comm_stream::handle> pending_;
  std::mutex mu_;
  trace_track trace_;
};

}  // namespace merak::comm
