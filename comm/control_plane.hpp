#pragma once
// The control plane a transport needs from the job that started it: who is
// in the job, a way to swap small blobs (worker addresses, unique ids) and
// word of a process that went away. It carries kilobytes, not tensors.
// The job's bootstrap (job/bootstrap.hpp) is the implementation; tests may
// bring their own.

#include <string>
#include <vector>

namespace merak::comm {

class control_plane {
 public:
  virtual ~control_plane() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Every rank's blob, in rank order. Collective: all ranks call it.
  // Throws merak::error naming the peer on a timeout or a closed connection.
  virtual std::vector<std::string> allgather(const std::string& mine) = 0;
  // Returns once every rank has called it.
  void barrier() { allgather({}); }

  // This process's IPv4 address on the job's network, one the other
  // processes reach; "127.0.0.1" in a job of one.
  virtual std::string local_address() const = 0;

  // Liveness, for a transport's wait loop (never blocks): a rank whose
  // process is known to have gone away, or -1. Sticky: once a rank is known
  // dead it is returned again. May be called from another thread than
  // allgather's.
  virtual int dead_peer() = 0;
};

}  // namespace merak::comm
