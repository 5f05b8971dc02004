#pragma once
// Device links for the stand-in device (tests/model/stand_in_device.hpp),
// registered for its kind as the CUDA module registers NCCL's
// (comm/device_links.hpp): a send copies the tensor to the host and sends
// it over the channel's transport in the links' tags (the wire NCCL's
// link stands for), a receive fills its device tensor when the bytes have
// come. Each link's set-up exchanges the two ranks, so both processes must
// make it; a tensor on another device than the link's is refused.

namespace merak::test {

void register_stand_in_links();
// Tensors sent over stand-in links, over every link of this process.
long stand_in_link_sends();

}  // namespace merak::test
