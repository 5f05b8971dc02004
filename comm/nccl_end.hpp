#pragma once
// Ends an NCCL communicator: a healthy one is finalised (NCCL's own work
// flushed, polled at most `bound`) and destroyed; a broken one, or one
// that does not finalise in time, aborted. Included by the NCCL code of
// comm/ only (nccl_transport.cpp, nccl_member.hpp).

#include <nccl.h>

#include <chrono>
#include <thread>

namespace merak::comm {

inline void end_nccl_communicator(ncclComm_t comm, bool broken, std::chrono::milliseconds bound) {
  if (!comm) return;
  if (broken) {
    ncclCommAbort(comm);
    return;
  }
  ncclResult_t rc = ncclCommFinalize(comm);
  const auto end = std::chrono::steady_clock::now() + bound;
  while (rc == ncclInProgress && std::chrono::steady_clock::now() < end) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    ncclCommGetAsyncError(comm, &rc);
  }
  if (rc == ncclSuccess)
    ncclCommDestroy(comm);
  else
    ncclCommAbort(comm);
}

}  // namespace merak::comm
