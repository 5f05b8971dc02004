// NCCL as the device links of CUDA tensors (comm/device_links.hpp,
// registered by comm/nccl_collectives.hpp's enable_nccl_links).
//
// A link with one peer holds two communicators of two members, one per
// direction (this process sends on one and receives on the other), each
// with a stream of its own: a send waits for the peer's matching receive,
// and with one stream for both directions two processes that each send
// before they receive would wait on each other. The pair's communicators
// are made in one order on both sides (the lower rank's sending one
// first), each with the id of its sender (member 0) sent over the
// channel's transport. A send waits on the device's stream for the
// tensor's kernels, then enqueues ncclSend; a receive allocates its tensor
// and enqueues ncclRecv; each transfer is finished when its event has
// happened, polled by the channel, and fails (the communicator aborted,
// the peer and the direction named) on NCCL's asynchronous error or after
// MERAK_NCCL_TIMEOUT_S.
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <memory>
#include <string>

#include <fmt/format.h>

#include "comm/device_links.hpp"
#include "comm/nccl_collectives.hpp"
#include "comm/nccl_member.hpp"
#include "core/error.hpp"

namespace merak::comm {
namespace {

// One direction of a link: a communicator whose member 0 sends.
struct nccl_direction {
  nccl_direction(transport& t, int peer, bool sending, model::device d, tag_t tag)
      : member(sending ? 0 : 1, 2, d.index,
               fmt::format("nccl link of rank {} {} rank {} on {}", t.rank(),
                           sending ? "to" : "from", peer, d.str()),
               [&](ncclUniqueId& id) {
                 if (sending)
                   t.isend(peer, tag, &id, sizeof id).wait();
                 else
                   t.irecv(peer, tag, &id, sizeof id).wait();
               }) {
    check_cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
               "cudaStreamCreateWithFlags");
  }
  ~nccl_direction() {
    if (stream) cudaStreamDestroy(stream);
  }
  nccl_member member;
  cudaStream_t stream = nullptr;
};

class nccl_transfer final : public device_transfer {
 public:
  nccl_transfer(nccl_direction& dir, const char* what)
      : dir_(dir), what_(what), end_(dir.member.deadline()) {
    check_cuda(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming), "cudaEventCreate");
    check_cuda(cudaEventRecord(done_, dir_.stream), "cudaEventRecord");
  }
  ~nccl_transfer() override {
    if (done_) cudaEventDestroy(done_);
  }
  bool test() override {
    if (!finished_) finished_ = dir_.member.finished(done_, what_, end_);
    return finished_;
  }

 private:
  nccl_direction& dir_;
  const char* what_;
  nccl_member::clock_type::time_point end_;
  cudaEvent_t done_ = nullptr;
  bool finished_ = false;
};

class nccl_link final : public device_link {
 public:
  nccl_link(transport& t, int peer, model::device d) : device_(d) {
    // The lower rank's sending direction first, on both sides.
    const bool lower = t.rank() < peer;
    const tag_t first = kdevice_link_tags, second = kdevice_link_tags + 1;
    auto made = std::make_unique<nccl_direction>(t, peer, lower, d, first);
    auto other = std::make_unique<nccl_direction>(t, peer, !lower, d, second);
    out_ = lower ? std::move(made) : std::move(other);
    in_ = lower ? std::move(other) : std::move(made);
    check_cuda(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming), "cudaEventCreate");
  }
  ~nccl_link() override {
    if (ready_) cudaEventDestroy(ready_);
  }

  std::unique_ptr<device_transfer> send(const model::tensor& x) override {
    MERAK_CHECK(x.where() == device_, "{}: a tensor on {}", out_->member.who(), x.where().str());
    out_->member.check_usable("send");
    select_device(device_.index);
    // After the kernels that made x on the device's stream.
    check_cuda(cudaEventRecord(ready_, static_cast<cudaStream_t>(model::device_stream(device_))),
               "cudaEventRecord");
    check_cuda(cudaStreamWaitEvent(out_->stream, ready_, 0), "cudaStreamWaitEvent");
    out_->member.settle(
        ncclSend(x.raw(), x.bytes(), ncclUint8, 1, out_->member.comm(), out_->stream), "send");
    return std::make_unique<nccl_transfer>(*out_, "send");
  }

  std::unique_ptr<device_transfer> recv(const model::shape_t& shape, model::dtype type,
                                        model::tensor& into) override {
    in_->member.check_usable("receive");
    select_device(device_.index);
    into = model::tensor(shape, type, device_);
    in_->member.settle(
        ncclRecv(into.raw(), into.bytes(), ncclUint8, 0, in_->member.comm(), in_->stream),
        "receive");
    return std::make_unique<nccl_transfer>(*in_, "receive");
  }

  model::device where() const override { return device_; }
  std::string name() const override { return "nccl"; }

 private:
  model::device device_;
  std::unique_ptr<nccl_direction> out_, in_;
  cudaEvent_t ready_ = nullptr;
};

}  // namespace

void enable_nccl_links() {
  register_device_links(
      model::device::kind::cuda,
      [](transport& t, int peer, model::device d) -> std::unique_ptr<device_link> {
        return std::make_unique<nccl_link>(t, peer, d);
      });
}

}  // namespace merak::comm
