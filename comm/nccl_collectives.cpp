// NCCL as the device collectives of CUDA tensors (comm/nccl_collectives.hpp).
//
// One communicator per group member, made at the group's first device
// tensor: member 0 makes the ncclUniqueId and sends it to the others over
// the group's host transport; each member joins with ncclCommInitRankConfig
// (non-blocking, so that the wait is bounded). Collectives are enqueued on
// the device's stream (model::device_stream), the stream of the kernels
// that made and will read the tensor, so they need no other
// synchronisation; or, with device_collectives_options::side_stream, on a
// stream of their own. Each call then waits for its event, polling NCCL's
// asynchronous error, at most the timeout (MERAK_NCCL_TIMEOUT_S, default
// 60 s): on an error or at the timeout it aborts the communicator and
// throws merak::error naming the member, the group's size, the collective
// and the device. Uneven shards, which NCCL's reduce-scatter and
// all-gather do not take, run as an all-reduce and as one broadcast per
// shard in a group call.
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "comm/collectives.hpp"
#include "comm/device_collectives.hpp"
#include "comm/nccl_collectives.hpp"
#include "comm/nccl_member.hpp"
#include "core/error.hpp"

namespace merak::comm {
namespace {

ncclDataType_t nccl_type(model::dtype t) {
  switch (t) {
    case model::dtype::f32:
      return ncclFloat32;
    case model::dtype::bf16:
      return ncclBfloat16;
    default:
      return ncclUint8;  // gathers move bytes
  }
}

class nccl_collectives final : public device_collectives {
 public:
  nccl_collectives(transport& group, model::device d, tag_t tag,
                   const device_collectives_options& options)
      : size_(group.size()),
        device_(d),
        member_(group.rank(), group.size(), d.index,
                fmt::format("nccl member {} of {} on {}", group.rank(), group.size(), d.str()),
                [&](ncclUniqueId& id) {
                  if (group.rank() == 0) {
                    std::vector<completion> sent;
                    for (int r = 1; r < group.size(); ++r)
                      sent.push_back(group.isend(r, tag, &id, sizeof id));
                    for (auto& c : sent) c.wait();
                  } else {
                    group.irecv(0, tag, &id, sizeof id).wait();
                  }
                }) {
    if (options.side_stream)
      check_cuda(cudaStreamCreateWithFlags(&own_stream_, cudaStreamNonBlocking),
                 "cudaStreamCreateWithFlags");
    check_cuda(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming), "cudaEventCreate");
  }

  ~nccl_collectives() override {
    select_device_quietly();
    if (done_) cudaEventDestroy(done_);
    if (own_stream_) cudaStreamDestroy(own_stream_);
  }

  void allreduce_sum(model::tensor& x) override {
    run(x, "all-reduce", [&](cudaStream_t s) {
      return ncclAllReduce(x.raw(), x.raw(), size_t(x.numel()), nccl_type(x.type()), ncclSum,
                           member_.comm(), s);
    });
  }

  void reduce_scatter_sum(model::tensor& x) override {
    const size_t n = size_t(x.numel());
    if (n % size_t(size_) != 0) return allreduce_sum(x);  // every shard summed
    run(x, "reduce-scatter", [&](cudaStream_t s) {
      const size_t count = n / size_t(size_);
      auto* base = x.raw();
      return ncclReduceScatter(base,
                               base + size_t(member_.rank()) * count * model::dtype_size(x.type()),
                               count, nccl_type(x.type()), ncclSum, member_.comm(), s);
    });
  }

  void allgather_shards(model::tensor& x) override {
    const size_t n = size_t(x.numel()), elem = model::dtype_size(x.type());
    auto* base = x.raw();
    const bool bytes = x.type() != model::dtype::f32 && x.type() != model::dtype::bf16;
    const ncclDataType_t type = bytes ? ncclUint8 : nccl_type(x.type());
    const size_t unit = bytes ? elem : 1;  // elements of `type` per tensor element
    if (n % size_t(size_) == 0) {
      run(x, "all-gather", [&](cudaStream_t s) {
        const size_t count = n / size_t(size_);
        return ncclAllGather(base + size_t(member_.rank()) * count * elem, base, count * unit, type,
                             member_.comm(), s);
      });
      return;
    }
    run(x, "all-gather (uneven shards)", [&](cudaStream_t s) {
      ncclResult_t rc = ncclGroupStart();
      for (int r = 0; r < size_ && (rc == ncclSuccess || rc == ncclInProgress); ++r) {
        const auto [b, e] = shard_range(n, size_, r);
        if (e > b)
          rc = ncclBroadcast(base + b * elem, base + b * elem, (e - b) * unit, type, r,
                             member_.comm(), s);
      }
      const ncclResult_t end = ncclGroupEnd();
      return rc == ncclSuccess || rc == ncclInProgress ? end : rc;
    });
  }

  std::string name() const override { return "nccl"; }

 private:
  void select_device_quietly() const {
    int current = -1;
    if (cudaGetDevice(&current) != cudaSuccess || current != device_.index)
      cudaSetDevice(device_.index);
  }

  // Enqueues `call` on its stream and waits for it, bounded.
  template <class Call>
  void run(model::tensor& x, const char* what, Call call) {
    member_.check_usable(what);
    MERAK_CHECK(x.where() == device_, "{}: {} of a tensor on {}", member_.who(), what,
                x.where().str());
    select_device(device_.index);
    const auto s =
        own_stream_ ? own_stream_ : static_cast<cudaStream_t>(model::device_stream(device_));
    member_.settle(call(s), what);
    check_cuda(cudaEventRecord(done_, s), "cudaEventRecord");
    member_.wait(done_, what);
  }

  int size_;
  model::device device_;
  nccl_member member_;
  cudaEvent_t done_ = nullptr;
  cudaStream_t own_stream_ = nullptr;  // device_collectives_options::side_stream
};

}  // namespace

void enable_nccl_collectives() {
  register_device_collectives(
      model::device::kind::cuda,
      [](transport& group, model::device d, tag_t tag,
         const device_collectives_options& options) -> std::unique_ptr<device_collectives> {
        return std::make_unique<nccl_collectives>(group, d, tag, options);
      });
}

namespace {
// Loaded with the CUDA module: registered when asked
// (MERAK_DEVICE_COLLECTIVES=1), until this code has run on a GPU.
const bool registered = [] {
  const char* v = std::getenv("MERAK_DEVICE_COLLECTIVES");
  if (v && std::string(v) == "1") {
    enable_nccl_collectives();
    enable_nccl_links();
  }
  return true;
}();
}  // namespace

}  // namespace merak::comm
