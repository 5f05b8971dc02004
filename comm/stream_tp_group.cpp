#include "comm/stream_tp_group.hpp"

#include <chrono>
#include <utility>

#include "core/error.hpp"

namespace merak::comm {

stream_tp_group::stream_tp_group(std::shared_ptr<transport> link, bool tracing)
    : link_(std::move(link)), stream_(*link_), tracing_(tracing) {}

int stream_tp_group::start_allreduce(model::tensor& x) {
  tag_t tag = next_++ % (kmax_collective_tag >> 1);
  int ticket = int(next_ & 0x7fffffff);
  MERAK_CHECK(x.type() == model::dtype::f32 || x.type() == model::dtype::bf16,
              "TP all-reduce of a {} tensor", model::dtype_name(x.type()));
  pending_.emplace(ticket, stream_.enqueue([this, &x, tag](transport& t) {
    double t0 = tracing_ ? trace_now() : 0;
    // The transports sum host memory: a device tensor goes through a host
    // copy and back.
    model::tensor staged;
    if (x.where().type != model::device::kind::cpu) staged = x.to(model::device::cpu());
    model::tensor& h = staged.defined() ? staged : x;
    if (h.type() == model::dtype::f32)
      allreduce_sum(t, h.span_f32(), tag);
    else
      allreduce_sum(t, std::span<bf16>(h.bf16s(), size_t(h.numel())), tag);
    if (staged.defined()) model::copy_bytes(x, 0, staged, 0, x.bytes());
    if (tracing_) {
      std::lock_guard lock(mu_);
      trace_.push_back({"tp-allreduce", t0, trace_now()});
    }
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
