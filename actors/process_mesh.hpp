#pragma once
// The CAF actor systems of a job's processes joined into one network, so
// that an actor on any process can message an actor on any other (CAF's
// io middleman: typed messages serialised with their inspect overloads,
// tensors as raw byte blocks). Included only by actors/*.cpp.
//
// Protocol (collective over the job's bootstrap, every process calls
// join_processes):
//
//   every process: publish a directory actor on loopback and put a gate
//                  (job/gate.hpp, purpose "mesh") in front of it on
//                  `listen_addr`, port chosen by the kernel; all-gather
//                  "addr port host" through the bootstrap
//   process i > 0: through a tunnel that proved the job token to process
//                  j's gate (and j's gate to it), connect to the directory
//                  of every process j < i (one connection per pair, so CAF
//                  routes every pair directly),
//                  then  --join_job(i, stages, reducers, home, watchdog)--> directory of 0
//   process 0:     collects the joins, then --join_job(0, {}, {}, home, watchdog)-->
//                  the home of every other process
//   bootstrap barrier: every connection stands before the job's actors talk
//
// The directory forwards what it receives to its process's `home` actor.
// Nothing reaches CAF's port from the network before it proved the job
// token; the gates stop admitting after the join.

#include <caf/all.hpp>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "actors/messages.hpp"

namespace merak::job {
class bootstrap;
}

namespace merak::actors {

// What one process hosts: its actors (in the order its placement lists
// them), their reducers (parallel; null where none), and the actor that
// speaks for the process (the coordinator on process 0).
struct process_view {
  std::vector<stage_api> actors;
  std::vector<reducer_api> reducers;
  caf::actor home;        // coordinator_api on process 0, process_api elsewhere
  watchdog_api watchdog;  // its heartbeats (watchdog.hpp)
  std::string addr;       // "HOSTNAME (listen address)", for messages
};

// On process 0: every process's view, in rank order (its own first). On
// the others: only process 0's home and watchdog are set. Every view's addr
// is set. `home` must be a scoped actor
// of the caller's thread: the joins arrive in its mailbox. Throws
// merak::error naming the process and address on a failed connection or a
// timeout.
// `links` receives the gate and tunnels the connections run through: keep
// it until the actor system is gone (destroying it closes the connections).
std::vector<process_view> join_processes(caf::actor_system& sys, caf::scoped_actor& home,
                                         job::bootstrap& b, process_view mine,
                                         const std::string& listen_addr,
                                         std::chrono::milliseconds timeout,
                                         std::shared_ptr<void>& links);

}  // namespace merak::actors
