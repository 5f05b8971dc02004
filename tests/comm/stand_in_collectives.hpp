#pragma once
// Device collectives for the stand-in device (tests/model/stand_in_device.hpp),
// registered for its kind as the CUDA module registers NCCL's: each call
// copies the tensor to the host, runs the host ring over the group's
// transport in tags of its own (NCCL's calls carry none) and copies the
// result back, so a layout run through the device-collective seam equals
// the CPU run bit for bit. It refuses a tensor on another device than the
// one it was made for (an NCCL communicator is bound to one GPU).

namespace merak::test {

void register_stand_in_collectives();
// Collectives the stand-in ran, over every group of this process.
long stand_in_collective_calls();
// Instances made (one per group member that met a device tensor).
long stand_in_collectives_made();
// All-gathers among the calls (sequence-parallel TP gathers, and the
// sharded optimizers' gathers of updated values).
long stand_in_allgathers();
// Those of bf16 tensors (sequence-parallel gathers in bf16 runs, and the
// sharded optimizers' gathers of a bf16 run's updated values).
long stand_in_bf16_allgathers();

}  // namespace merak::test
