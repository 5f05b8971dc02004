#include "comm/transport.hpp"

#include <poll.h>

#include <thread>

namespace merak::comm {

void transport::await_event(std::chrono::milliseconds max, int wake_fd) {
  if (wake_fd < 0) {
    std::this_thread::sleep_for(max);
    return;
  }
  pollfd p{wake_fd, POLLIN, 0};
  ::poll(&p, 1, static_cast<int>(max.count()));
}

}  // namespace merak::comm
