#pragma once
// Internal to actors/svm_consensus.cpp and actors/svm_remote.cpp: how the
// consensus side sends one phase to every worker and gathers one reply from
// each (messages: actors/svm_messages.hpp). The phase goes out as plain
// sends and the replies come back as messages that carry the worker's rank,
// so the same receive also sees a worker's `down` (the consensus side
// monitors every worker) and a deadline; a request/response pair would only
// time out when a remote worker's process dies in the middle of a step.

#include <caf/all.hpp>

#include <chrono>
#include <string>
#include <vector>

#include "actors/svm_consensus.hpp"
#include "actors/svm_messages.hpp"
#include "core/error.hpp"

namespace merak::actors::detail {

// "phase 'local' of iteration 3" or "phase 'setup'" (iteration 0).
inline std::string svm_phase_name(const char* phase, int iteration) {
  return iteration > 0 ? fmt::format("'{}' of iteration {}", phase, iteration)
                       : fmt::format("'{}'", phase);
}

inline int svm_rank_of(const std::vector<svm_worker_api>& ws, const caf::actor_addr& a) {
  for (size_t k = 0; k < ws.size(); ++k)
    if (ws[k].address() == a) return int(k);
  return -1;
}

// Sends `msg` to every worker in `ws` (rank k = ws[k]), then receives one
// Reply from each and calls on_reply(k, Reply&) in arrival order. Throws
// merak::error naming the worker on a reply that says what failed, on a
// worker's down message, and when `timeout` passes before every worker
// answered (naming the ones that did not). Call from the consensus side's
// scoped actor, which monitors every worker.
template <class Reply, class OnReply, class Msg>
void svm_phase(caf::actor_system& sys, caf::scoped_actor& self,
               const std::vector<svm_worker_api>& ws, std::chrono::milliseconds timeout,
               const char* phase, int iteration, OnReply&& on_reply, const Msg& msg) {
  using clock = std::chrono::steady_clock;
  for (const auto& w : ws) self->send(w, msg);
  std::vector<bool> got(ws.size(), false);
  size_t left = ws.size();
  const auto deadline = clock::now() + timeout;
  while (left > 0) {
    const auto now = clock::now();
    bool timed_out = now >= deadline;
    if (!timed_out)
      self->receive(
          [&](Reply& r) {
            const int32_t k = r.from.rank;
            if (!r.from.error.empty())
              fail("svm worker {} failed in {}: {}", k, svm_phase_name(phase, iteration),
                   r.from.error);
            if (k < 0 || size_t(k) >= ws.size() || got[size_t(k)])
              fail("svm worker {} answered {} twice or out of turn (of {} workers)", k,
                   svm_phase_name(phase, iteration), ws.size());
            got[size_t(k)] = true;
            --left;
            on_reply(int(k), r);
          },
          [&](caf::down_msg& dm) {
            const int k = svm_rank_of(ws, dm.source);
            fail("svm worker {} failed in {}: it went down ({}{})", k,
                 svm_phase_name(phase, iteration), sys.render(dm.reason),
                 dm.reason == caf::exit_reason::remote_link_unreachable
                     ? ": its process died or its connection broke"
                     : "");
          },
          caf::after(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now) +
                     std::chrono::milliseconds(1)) >>
              [&] { timed_out = true; });
    if (timed_out && left > 0) {
      std::string missing;
      for (size_t k = 0; k < ws.size(); ++k)
        if (!got[k]) missing += (missing.empty() ? "" : ", ") + std::to_string(k);
      fail("svm worker{} {} did not answer {} within {} ms", left > 1 ? "s" : "", missing,
           svm_phase_name(phase, iteration), timeout.count());
    }
  }
}

// The iterations of consensus ADMM over the workers `ws` (rank k = ws[k],
// each set up and monitored by `self`) with the consensus maths in `red`,
// until it stops; fills res.iterations, converged and the residuals.
// Throws merak::error naming the worker (svm_phase).
void drive_consensus(caf::actor_system& sys, caf::scoped_actor& self,
                     const std::vector<svm_worker_api>& ws, int64_t p, svm::consensus_reducer& red,
                     const svm_actor_options& options, svm::consensus_result& res);

}  // namespace merak::actors::detail
