#pragma once
// One member of an NCCL communicator on one GPU, for the NCCL code of comm/
// that runs on CUDA tensors (nccl_collectives.cpp, nccl_links.cpp): the
// non-blocking join, the bounded waits that poll NCCL's asynchronous error,
// and the end (comm/nccl_end.hpp). Every wait is bounded by
// MERAK_NCCL_TIMEOUT_S (default 60 s); on an error or at the bound the
// communicator is aborted and merak::error names the member (`who`), what
// it was doing and why.

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <chrono>
#include <cstdlib>
#include <functional>
#include <string>
#include <thread>

#include <fmt/format.h>

#include "comm/nccl_end.hpp"
#include "core/error.hpp"

namespace merak::comm {

inline void check_cuda(cudaError_t e, const char* call) {
  if (e != cudaSuccess) fail("{} failed: {}", call, cudaGetErrorString(e));
}

// Makes GPU `index` the calling thread's current device.
inline void select_device(int index) {
  int current = -1;
  if (cudaGetDevice(&current) != cudaSuccess || current != index)
    check_cuda(cudaSetDevice(index), "cudaSetDevice");
}

class nccl_member {
 public:
  using clock_type = std::chrono::steady_clock;

  // Joins a communicator of `size` members as member `rank` on GPU
  // `device`: member 0 makes the ncclUniqueId and `share` sends it to the
  // others; on the others `share` receives it.
  nccl_member(int rank, int size, int device, std::string who,
              const std::function<void(ncclUniqueId&)>& share)
      : rank_(rank), size_(size), device_(device), who_(std::move(who)), timeout_(bound()) {
    select_device(device_);
    ncclUniqueId id{};
    if (rank_ == 0) check(ncclGetUniqueId(&id), "ncclGetUniqueId");
    share(id);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    const auto rc = ncclCommInitRankConfig(&comm_, size_, id, rank_, &config);
    if (rc != ncclSuccess && rc != ncclInProgress) {
      if (comm_) ncclCommAbort(comm_), comm_ = nullptr;
      fail("{}: ncclCommInitRankConfig failed: {}{}", who_, ncclGetErrorString(rc),
           rc == ncclInvalidUsage ? " (NCCL needs one GPU per member)" : "");
    }
    settle(rc, "set-up (every member must join)");
  }

  // A healthy communicator is finalised (NCCL's own work flushed, at most
  // 10 s) and destroyed; a broken one, or one that does not finalise, aborted.
  ~nccl_member() {
    int current = -1;
    if (cudaGetDevice(&current) != cudaSuccess || current != device_) cudaSetDevice(device_);
    end_nccl_communicator(comm_, broken_, std::chrono::seconds(10));
  }
  nccl_member(const nccl_member&) = delete;
  nccl_member& operator=(const nccl_member&) = delete;

  ncclComm_t comm() const { return comm_; }
  int rank() const { return rank_; }
  const std::string& who() const { return who_; }
  clock_type::time_point deadline() const { return clock_type::now() + timeout_; }

  void check(ncclResult_t rc, const char* call) const {
    if (rc != ncclSuccess) fail("{}: {} failed: {}", who_, call, ncclGetErrorString(rc));
  }
  // Refuses work on a communicator aborted after an earlier error.
  void check_usable(const char* what) const {
    if (broken_) fail("{}: {}: the communicator was aborted after an earlier error", who_, what);
  }

  // Waits for a non-blocking call to leave ncclInProgress, bounded.
  void settle(ncclResult_t rc, const char* what) {
    const auto end = deadline();
    while (rc == ncclInProgress) {
      if (clock_type::now() > end) abort_with(what, "did not finish within the timeout");
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      ncclCommGetAsyncError(comm_, &rc);
    }
    if (rc != ncclSuccess) abort_with(what, ncclGetErrorString(rc));
  }

  // Whether `done` (recorded after the work of `what`) has happened; throws
  // on NCCL's asynchronous error or past `end`.
  bool finished(cudaEvent_t done, const char* what, clock_type::time_point end) {
    const cudaError_t e = cudaEventQuery(done);
    if (e == cudaSuccess) return true;
    if (e != cudaErrorNotReady) check_cuda(e, "cudaEventQuery");
    ncclResult_t async = ncclSuccess;
    ncclCommGetAsyncError(comm_, &async);
    if (async != ncclSuccess && async != ncclInProgress)
      abort_with(what, ncclGetErrorString(async));
    if (clock_type::now() > end)
      abort_with(what, "did not finish within the timeout (a member that never joined it?)");
    return false;
  }

  // Waits until `done` has happened (finished), bounded.
  void wait(cudaEvent_t done, const char* what) {
    const auto end = deadline();
    for (int spins = 0; !finished(done, what, end); ++spins)
      if (spins > 1000) std::this_thread::sleep_for(std::chrono::microseconds(50));
  }

  [[noreturn]] void abort_with(const char* what, const std::string& why) {
    broken_ = true;
    const std::string last = comm_ ? ncclGetLastError(comm_) : "";
    fail("{}: {}: {}{}{} (after {} ms; MERAK_NCCL_TIMEOUT_S sets the bound)", who_, what, why,
         last.empty() ? "" : ": ", last, timeout_.count());
  }

 private:
  static std::chrono::milliseconds bound() {
    const char* v = std::getenv("MERAK_NCCL_TIMEOUT_S");
    const double s = v ? std::atof(v) : 60.0;
    return std::chrono::milliseconds(int64_t((s > 0 ? s : 60.0) * 1000));
  }

  int rank_, size_, device_;
  std::string who_;
  std::chrono::milliseconds timeout_;
  ncclComm_t comm_ = nullptr;
  bool broken_ = false;
};

}  // namespace merak::comm
