#pragma once
// The transport interface: tagged point-to-point sends and receives of byte
// buffers between the ranks of one group, with completions.
//
// Three implementations share it: in-process (inproc.hpp: mailboxes between
// threads of one process), UCX (ucx_transport.hpp: host memory between
// processes and hosts) and NCCL (GPU memory, when CUDA is built). Collectives
// (collectives.hpp) and gradient codecs are written once against it.
//
// Contract
// - A group has size() ranks numbered 0..size()-1; this endpoint is rank().
// - isend(peer, tag, buf, n) / irecv(peer, tag, buf, n) start an operation
//   and return at once. The caller keeps `buf` alive and untouched until the
//   returned completion is done. A message matches the receive with the
//   same (source, tag); messages with equal (source, destination, tag) match
//   in the order they were sent. A receive's size must equal the sent size
//   (else the receive fails with an error naming peer and tag).
// - completion::wait() blocks until done or until the transport's timeout
//   passes, then throws merak::error naming this rank, the peer and the tag.
//   A failure of the peer (closed connection, dead process) also throws,
//   naming the peer. Never hangs.
// - bytes_sent() counts the payload bytes this endpoint has handed to the
//   network (measured by the transport, not estimated).
// - A send may complete only while its receiver keeps waiting on its own
//   transport (UCX's rendezvous needs the receiver's progress): a rank that
//   is done receiving must not block elsewhere (a socket, a sleep) while a
//   peer still waits for a send to it. End a phase of traffic with
//   comm::barrier over the transport before blocking outside it.
// - An endpoint is used by one thread at a time (its owner); different
//   endpoints of an in-process group are used by different threads.

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace merak::comm {

using tag_t = uint64_t;

// State of one outstanding operation; implemented by each transport.
class operation {
 public:
  virtual ~operation() = default;
  // True once the operation finished (successfully or not); never blocks.
  virtual bool test() = 0;
  // Blocks until done or `deadline`; throws merak::error on failure or
  // timeout.
  virtual void wait(std::chrono::steady_clock::time_point deadline) = 0;
};

// Handle to an outstanding send or receive. Empty (done) by default.
class completion {
 public:
  completion() = default;
  completion(std::shared_ptr<operation> op, std::chrono::milliseconds timeout)
      : op_(std::move(op)), timeout_(timeout) {}
  bool test() { return !op_ || op_->test(); }
  // Waits at most the transport's timeout; throws merak::error on failure.
  void wait() {
    if (op_) op_->wait(std::chrono::steady_clock::now() + timeout_);
    op_.reset();
  }

 private:
  std::shared_ptr<operation> op_;
  std::chrono::milliseconds timeout_{0};
};

class transport {
 public:
  virtual ~transport() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // A short name for messages and benchmarks: "inproc", "ucx", "nccl".
  virtual std::string name() const = 0;

  virtual completion isend(int peer, tag_t tag, const void* buf, size_t bytes) = 0;
  virtual completion irecv(int peer, tag_t tag, void* buf, size_t bytes) = 0;

  uint64_t bytes_sent() const { return bytes_sent_.load(std::memory_order_relaxed); }
  void reset_bytes_sent() { bytes_sent_.store(0, std::memory_order_relaxed); }

  // Collectives bracket their traffic with these (nested calls count): a
  // peer's message is due soon, so a transport whose waits sleep (UCX) may
  // busy-poll longer before sleeping (ucx_options::collective_spin).
  virtual void begin_collective() {}
  virtual void end_collective() {}

  // The collectives' sequence number on this endpoint (collectives.hpp's
  // check that every rank issues the same calls): the next call's.
  uint64_t next_collective_call() { return ++collective_calls_; }
  // The training step the endpoint's user is in (-1: none), which the
  // sequence check names beside a call; thread-safe, set by the user.
  void set_step(int64_t step) { step_.store(step, std::memory_order_relaxed); }
  int64_t step() const { return step_.load(std::memory_order_relaxed); }

  // Ends the job's traffic on this endpoint: every current and later wait
  // fails at once (within ~100 ms) with merak::error naming `why`, and
  // shutting down no longer waits on peers. Thread-safe: the point is to
  // free a thread blocked in a wait on a peer that will never answer (a
  // stopped process). Transports whose peers share this process ignore it.
  virtual void cancel(const std::string& why) {}

  // For a thread that drives many operations through completion::test()
  // and sleeps between events: makes the progress there is to make and,
  // when there was none, arms the endpoint so that its next event (an
  // arriving message, a peer's reply) makes the returned descriptor
  // readable. Returns that descriptor, to sleep on with poll(); -1 when the
  // endpoint has none (in-process peers need no progress: sleep on your own
  // wake-up alone); kprogress when progress was made or events are pending
  // (test the operations again instead of sleeping). Never throws.
  static constexpr int kprogress = -2;
  virtual int arm_event_fd() { return -1; }

  // Bound of every wait on this endpoint (default 60 s).
  std::chrono::milliseconds timeout() const { return timeout_; }
  void set_timeout(std::chrono::milliseconds t) { timeout_ = t; }

 protected:
  void count_sent(size_t bytes) { bytes_sent_.fetch_add(bytes, std::memory_order_relaxed); }
  std::chrono::milliseconds timeout_{60000};

 private:
  std::atomic<uint64_t> bytes_sent_{0};
  uint64_t collective_calls_ = 0;
  std::atomic<int64_t> step_{-1};
};

}  // namespace merak::comm
