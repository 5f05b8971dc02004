#include "comm/stream_tp_group.hpp"

#include <chrono>
#include <utility>

#include "core/error.hpp"

namespace merak::comm {

stream_tp_group::stream_tp_group(std::shared_ptr<transport> link, bool tracing)
    : link_(std::move(link)), stream_(*link_), tracing_(tracing) {}

int stream_tp_group::start_allreduce(model::tensor& x) {
  return start(x, collective::allreduce);
}
int stream_tp_group::start_reduce_scatter(model::tensor& x) {
  return start(x, collective::reduce_scatter);
}
int stream_tp_group::start_allgather(model::tensor& x) {
  return start(x, collective::allgather);
}

int stream_tp_group::start(model::tensor& x, collective what) {
  tag_t tag = next_++ % (kmax_collective_tag >> 1);
  int ticket = int(next_ & 0x7fffffff);
  MERAK_CHECK(x.type() == model::dtype::f32 || x.type() == model::dtype::bf16,
              "TP collective of a {} tensor", model::dtype_name(x.type()));
  pending_.emplace(ticket, stream_.enqueue([this, &x, tag, what](transport& t) {
    double t0 = tracing_ ? trace_now() : 0;
    const char* name = what == collective::allreduce        ? "tp-allreduce"
                       : what == collective::reduce_scatter ? "tp-reduce-scatter"
                                                            : "tp-allgather";
    auto traced = [&] {
      if (!tracing_) return;
      std::lock_guard lock(mu_);
      trace_.push_back({name, t0, trace_now()});
    };
    const bool on_device = x.where().type != model::device::kind::cpu;
    if (on_device && !device_tried_) {
      device_tried_ = true;
      device_ = make_device_collectives(t, x.where(), tag);
    }
    if (on_device && device_) {
      switch (what) {
        case collective::allreduce:
          device_->allreduce_sum(x);
          break;
        case collective::reduce_scatter:
          device_->reduce_scatter_sum(x);
          break;
        case collective::allgather:
          device_->allgather_shards(x);
          break;
      }
      traced();
      return;
    }
    // The transports work on host memory: a device tensor goes through a
    // host copy and back.
    model::tensor staged;
    if (on_device) staged = x.to(model::device::cpu());
    model::tensor& h = staged.defined() ? staged : x;
    const bool f32 = h.type() == model::dtype::f32;
    switch (what) {
      case collective::allreduce:
        if (f32)
          allreduce_sum(t, h.span_f32(), tag);
        else
          allreduce_sum(t, std::span<bf16>(h.bf16s(), size_t(h.numel())), tag);
        break;
      case collective::reduce_scatter:
        if (f32)
          reduce_scatter_sum(t, h.span_f32(), tag);
        else
          reduce_scatter_sum(t, std::span<bf16>(h.bf16s(), size_t(h.numel())), tag);
        break;
      case collective::allgather:
        allgather_shards(t, h.raw(), size_t(h.numel()), model::dtype_size(h.type()), tag);
        break;
    }
    if (staged.defined()) model::copy_bytes(x, 0, staged, 0, x.bytes());
    traced();
  }));
  return ticket;
}

void stream_tp_group::wait(int ticket) {
  auto it = pending_.find(ticket);
  MERAK_CHECK(it != pending_.end(), "unknown all-reduce ticket {}", ticket);
  auto h = std::move(it->second);
  pending_.erase(it);
  h.wait();
}

trace_track stream_tp_group::take_trace() {
  std::lock_guard lock(mu_);
  return std::exchange(trace_, {});
}

}  // namespace merak::comm
