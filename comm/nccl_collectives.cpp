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

#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "comm/collectives.hpp"
#include "comm/device_collectives.hpp"
#include "comm/nccl_end.hpp"
#include "comm/nccl_collectives.hpp"
#include "core/error.hpp"

namespace merak::comm {
namespace {

using clock_type = std::chrono::steady_clock;
using namespace std::chrono_literals;

std::chrono::milliseconds timeout() {
  const char* v = std::getenv("MERAK_NCCL_TIMEOUT_S");
  const double s = v ? std::atof(v) : 60.0;
  return std::chrono::milliseconds(int64_t((s > 0 ? s : 60.0) * 1000));
}

void check_cuda(cudaError_t e, const char* call) {
  if (e != cudaSuccess) fail("{} failed: {}", call, cudaGetErrorString(e));
}

void select_device(int index) {
  int current = -1;
  if (cudaGetDevice(&current) != cudaSuccess || current != index)
    check_cuda(cudaSetDevice(index), "cudaSetDevice");
}

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
      : rank_(group.rank()), size_(group.size()), device_(d), timeout_(timeout()) {
    select_device(device_.index);
    if (options.side_stream) {
      check_cuda(cudaStreamCreateWithFlags(&own_stream_, cudaStreamNonBlocking),
                 "cudaStreamCreateWithFlags");
    }
    ncclUniqueId id{};
    if (rank_ == 0) {
      check(ncclGetUniqueId(&id), "ncclGetUniqueId");
      std::vector<completion> sent;
      for (int r = 1; r < size_; ++r) sent.push_back(group.isend(r, tag, &id, sizeof id));
      for (auto& c : sent) c.wait();
    } else {
      group.irecv(0, tag, &id, sizeof id).wait();
    }
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    const auto rc = ncclCommInitRankConfig(&comm_, size_, id, rank_, &config);
    if (rc != ncclSuccess && rc != ncclInProgress) {
      if (comm_) ncclCommAbort(comm_), comm_ = nullptr;
      fail("{}: ncclCommInitRankConfig failed: {}{}", who(), ncclGetErrorString(rc),
           rc == ncclInvalidUsage ? " (NCCL needs one GPU per member)" : "");
    }
    settle(rc, "set-up (every member of the group must join)");
    check_cuda(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming), "cudaEventCreate");
  }

  // A healthy communicator is finalised (NCCL's own work flushed, at most
  // 10 s) and destroyed; a broken one, or one that does not finalise, aborted.
  ~nccl_collectives() override {
    int current = -1;
    if (cudaGetDevice(&current) != cudaSuccess || current != device_.index)
      cudaSetDevice(device_.index);
    end_nccl_communicator(comm_, broken_, 10s);
    if (done_) cudaEventDestroy(done_);
    if (own_stream_) cudaStreamDestroy(own_stream_);
  }

  void allreduce_sum(model::tensor& x) override {
    run(x, "all-reduce", [&](cudaStream_t s) {
      return ncclAllReduce(x.raw(), x.raw(), size_t(x.numel()), nccl_type(x.type()), ncclSum,
                           comm_, s);
    });
  }

  void reduce_scatter_sum(model::tensor& x) override {
    const size_t n = size_t(x.numel());
    if (n % size_t(size_) != 0) return allreduce_sum(x);  // every shard summed
    run(x, "reduce-scatter", [&](cudaStream_t s) {
      const size_t count = n / size_t(size_);
      auto* base = x.raw();
      return ncclReduceScatter(base, base + size_t(rank_) * count * model::dtype_size(x.type()),
                               count, nccl_type(x.type()), ncclSum, comm_, s);
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
        return ncclAllGather(base + size_t(rank_) * count * elem, base, count * unit, type, comm_,
                             s);
      });
      return;
    }
    run(x, "all-gather (uneven shards)", [&](cudaStream_t s) {
      ncclResult_t rc = ncclGroupStart();
      for (int r = 0; r < size_ && (rc == ncclSuccess || rc == ncclInProgress); ++r) {
        const auto [b, e] = shard_range(n, size_, r);
        if (e > b)
          rc = ncclBroadcast(base + b * elem, base + b * elem, (e - b) * unit, type, r, comm_, s);
      }
      const ncclResult_t end = ncclGroupEnd();
      return rc == ncclSuccess || rc == ncclInProgress ? end : rc;
    });
  }

  std::string name() const override { return "nccl"; }

 private:
  std::string who() const {
    return fmt::format("nccl member {} of {} on {}", rank_, size_, device_.str());
  }

  void check(ncclResult_t rc, const char* call) const {
    if (rc != ncclSuccess) fail("{}: {} failed: {}", who(), call, ncclGetErrorString(rc));
  }

  // Waits for a non-blocking call to leave ncclInProgress, bounded.
  void settle(ncclResult_t rc, const char* what) {
    const auto deadline = clock_type::now() + timeout_;
    while (rc == ncclInProgress) {
      if (clock_type::now() > deadline) abort_with(what, "did not finish within the timeout");
      std::this_thread::sleep_for(1ms);
      ncclCommGetAsyncError(comm_, &rc);
    }
    if (rc != ncclSuccess) abort_with(what, ncclGetErrorString(rc));
  }

  [[noreturn]] void abort_with(const char* what, const std::string& why) {
    broken_ = true;
    const std::string last = comm_ ? ncclGetLastError(comm_) : "";
    fail("{}: {}: {}{}{} (after {} ms; MERAK_NCCL_TIMEOUT_S sets the bound)", who(), what, why,
         last.empty() ? "" : ": ", last, timeout_.count());
  }

  // Enqueues `call` on its stream and waits for it, bounded.
  template <class Call>
  void run(model::tensor& x, const char* what, Call call) {
    if (broken_) fail("{}: {}: the communicator was aborted after an earlier error", who(), what);
    MERAK_CHECK(x.where() == device_, "{}: {} of a tensor on {}", who(), what, x.where().str());
    select_device(device_.index);
    const auto s =
        own_stream_ ? own_stream_ : static_cast<cudaStream_t>(model::device_stream(device_));
    settle(call(s), what);
    check_cuda(cudaEventRecord(done_, s), "cudaEventRecord");
    const auto deadline = clock_type::now() + timeout_;
    for (int spins = 0;; ++spins) {
      const cudaError_t e = cudaEventQuery(done_);
      if (e == cudaSuccess) return;
      if (e != cudaErrorNotReady) check_cuda(e, "cudaEventQuery");
      ncclResult_t async = ncclSuccess;
      ncclCommGetAsyncError(comm_, &async);
      if (async != ncclSuccess && async != ncclInProgress)
        abort_with(what, ncclGetErrorString(async));
      if (clock_type::now() > deadline)
        abort_with(what, "did not finish within the timeout (a member that never joined it?)");
      if (spins > 1000) std::this_thread::sleep_for(50us);
    }
  }

  int rank_, size_;
  model::device device_;
  std::chrono::milliseconds timeout_;
  ncclComm_t comm_ = nullptr;
  cudaEvent_t done_ = nullptr;
  cudaStream_t own_stream_ = nullptr;  // device_collectives_options::side_stream
  bool broken_ = false;
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
  if (v && std::string(v) == "1") enable_nccl_collectives();
  return true;
}();
}  // namespace

}  // namespace merak::comm
