#pragma once
// NCCL as the device collectives of CUDA tensors (comm/device_collectives.hpp):
// the TP groups' sums, reduce-scatters and all-gathers of tensors on GPUs
// without host copies. Built only with CUDA and NCCL (target
// merak_comm_nccl, and into the CUDA module merak loads on --device cuda),
// and registered there only with MERAK_DEVICE_COLLECTIVES=1 until it has
// run on a GPU (docs/gpu.md).
//
// One communicator per group member, made at the group's first device
// tensor: member 0 makes the ncclUniqueId and sends it over the group's
// host transport; every member joins with a non-blocking
// ncclCommInitRankConfig. Each call is enqueued on the device's stream and
// waited for at most MERAK_NCCL_TIMEOUT_S (default 60) seconds, polling
// NCCL's asynchronous error; on an error or at the bound the communicator
// is aborted and merak::error names the member, the group's size, the
// device and the collective. Uneven shards run as an all-reduce and as a
// group of broadcasts, one per shard.

namespace merak::comm {

// Registers NCCL's collectives for CUDA tensors (comm/device_collectives.hpp).
void enable_nccl_collectives();

// Registers NCCL's links for the tensor channel's CUDA tensors
// (comm/device_links.hpp; comm/nccl_links.cpp): ncclSend / ncclRecv on two
// communicators a pair of processes, one per direction. Registered with
// the collectives, under the same switch.
void enable_nccl_links();

}  // namespace merak::comm
