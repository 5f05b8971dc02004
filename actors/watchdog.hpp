#pragma once
// The watchdog actor: one per process of a multi-process job. Included only
// by actors/*.cpp.
//
//   watchdog --ping--> each watched peer's watchdog --pong--> watchdog
//   every `period`; a peer silent for `limit` (job::heartbeats):
//   watchdog --job_failed("NAME has answered no heartbeat for S s ...")--> home
//
// Process 0's watchdog watches every other process; the others watch process
// 0 (the coordinator). Every watchdog answers every ping. It runs on the
// actor system's scheduler, never on a stage's thread, so a process busy
// computing still answers; a stopped (SIGSTOP) or hung one does not.
//
//   idle --watch_peers(peers, names, period, limit)--> beating --(overdue)--> done

#include <caf/all.hpp>

#include <chrono>
#include <string>
#include <vector>

#include "actors/messages.hpp"

namespace merak::actors {

// Answers pings at once; starts watching on `watch`.
watchdog_api spawn_watchdog(caf::actor_system& sys, failure_api home);

// Starts `watchdog` on `peers` (other processes' watchdogs), named in the
// failure message by `names`.
void start_watchdog(caf::scoped_actor& self, const watchdog_api& watchdog,
                    std::vector<watchdog_api> peers, std::vector<std::string> names,
                    std::chrono::milliseconds period, std::chrono::milliseconds limit);

}  // namespace merak::actors
