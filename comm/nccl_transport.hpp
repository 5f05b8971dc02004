#pragma once
// NCCL transport: GPU memory between processes, one rank per process and
// GPU (docs/comm-transport.md, "NCCL"). Built only with CUDA and NCCL
// (target merak_comm_nccl, MERAK_WITH_NCCL); nothing else in merak needs it.
//
// Two levels, because NCCL is a collective library:
// - Collectives (what NCCL is for): allreduce_sum / allreduce_avg (native
//   ncclAllReduce), allgather, broadcast, allreduce_or and barrier, on device
//   buffers, enqueued on the transport's CUDA stream; each call returns once
//   the stream finished it (or throws, see Waits). comm/collectives.hpp's
//   ring does not run over this transport: it adds on the host.
// - Point to point (the transport.hpp interface): isend / irecv of device
//   buffers as ncclSend / ncclRecv. NCCL has no tags: messages between a
//   pair match in the order they were posted, per direction. So over NCCL
//   the contract's "(source, tag) matching" narrows to: per (source,
//   destination), receives must be posted in the order of the sends (a tag
//   is recorded for error messages only, not carried). Operations are not
//   launched at once: every isend / irecv posted since the last launch goes
//   into one ncclGroupStart/End when any completion is first tested or
//   waited on, so a rank may post its receives and sends in any order (the
//   ring's pattern) without the deadlock of ungrouped blocking NCCL calls.
//   Sends to oneself are allowed (NCCL pairs them within the group).
//   Completions must not outlive the transport.
// - Memory: every buffer must be device memory (cudaMalloc, managed or
//   cudaMallocAsync) on this rank's GPU; a host pointer is refused with an
//   error naming the peer and tag.
// - Set-up: rank 0 makes the ncclUniqueId and the bootstrap all-gathers it;
//   the communicator is non-blocking (ncclConfig_t::blocking = 0) so that
//   even its initialisation is a bounded wait. Device: options.device, else
//   the local rank (LOCAL_RANK, OMPI_COMM_WORLD_LOCAL_RANK, SLURM_LOCALID,
//   else the rank). NCCL (>= 2.5) refuses two ranks of one communicator on
//   one GPU ("Duplicate GPU detected"): a job needs one GPU per rank, and
//   the error says so.
// - Waits: every wait polls cudaEventQuery and ncclCommGetAsyncError (short
//   spin, then 50 µs sleeps, so an idle wait burns little CPU) and the
//   bootstrap's liveness watch every 50 ms; at the transport's timeout, or
//   on an asynchronous NCCL error, it calls ncclCommAbort and throws
//   merak::error naming this rank, the operation and the peer (or, for a
//   collective, the dead rank when the bootstrap knows it). After an abort
//   the transport is broken: every later call throws at once.
// - bytes_sent() counts the payload of point-to-point sends to other ranks
//   (what this endpoint handed to ncclSend). NCCL does not report the bytes
//   its collectives move; collective_bytes() gives the ring formula's
//   bytes per rank for the collectives issued (an estimate, labelled so).
// - Threads: one thread at a time (its owner), like every transport.

#include <cuda_runtime_api.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "comm/control_plane.hpp"
#include "comm/transport.hpp"

namespace merak::comm {

struct nccl_options {
  std::chrono::milliseconds timeout{60000};  // bound of every wait
  int device = -1;                           // -1: the local rank (see above)
};

class nccl_transport : public transport {
 public:
  // In-place collectives over all ranks on device buffers; collective (every
  // rank calls them in the same order with the same sizes). Return when this
  // rank's part finished; throw merak::error on timeout or NCCL failure.
  virtual void allreduce_sum(float* data, size_t count) = 0;
  virtual void allreduce_avg(float* data, size_t count) = 0;  // ncclAvg: sum / P
  // Bitwise OR of bitmaps: NCCL has no OR, so this all-gathers the P
  // bitmaps (P·count words of device scratch) and ORs them on the host.
  virtual void allreduce_or(uint64_t* data, size_t count) = 0;
  // mine (count floats) <- the sum over ranks of block `rank` of their
  // `all` (P·count floats, rank order): ncclReduceScatter, the distributed
  // optimizer's and sequence parallelism's half of an all-reduce. NCCL
  // splits evenly: a caller with n % P != 0 pads to P·count.
  virtual void reduce_scatter_sum(const float* all, float* mine, size_t count) = 0;
  // The same over bf16 elements (uint16_t storage; NCCL sums in float and
  // rounds once per addition as its ncclBfloat16 reduction does).
  virtual void reduce_scatter_sum_bf16(const uint16_t* all, uint16_t* mine, size_t count) = 0;
  // all (P·bytes, rank order) <- every rank's `mine` (bytes each).
  virtual void allgather(const void* mine, size_t bytes, void* all) = 0;
  virtual void broadcast(void* data, size_t bytes, int root) = 0;
  virtual void barrier() = 0;

  // The stream every operation of this transport runs on; the caller may
  // enqueue its own kernels on it before a collective.
  virtual cudaStream_t stream() const = 0;
  virtual int device() const = 0;
  // Ring-formula bytes per rank of the collectives issued since the last
  // reset (2(P-1)/P·n for all-reduce, (P-1)·n for all-gather, n for a
  // broadcast): an estimate, NCCL does not count.
  double collective_bytes() const { return collective_bytes_; }
  void reset_collective_bytes() { collective_bytes_ = 0; }

 protected:
  double collective_bytes_ = 0;
};

// Collective over `b`: every rank calls it. `b` is kept to watch the job's
// processes. Throws merak::error naming the rank and the reason when this
// process has no usable GPU, when NCCL refuses the communicator (e.g. two
// ranks on one GPU) or when set-up times out.
std::unique_ptr<nccl_transport> make_nccl_transport(std::shared_ptr<control_plane> b,
                                                    const nccl_options& options = {});

// CUDA devices visible to this process (0 without a driver or GPU), and why
// none is usable ("" when one is).
int nccl_device_count();
std::string nccl_unavailable_reason();

// "2.28.9": the NCCL library this process runs with.
std::string nccl_version();

}  // namespace merak::comm
