#include "actors/actor_errors.hpp"
#include "actors/watchdog.hpp"

#include <fmt/format.h>

#include <memory>
#include <optional>

#include "actors/messages.hpp"
#include "job/heartbeat.hpp"

namespace merak::actors {
namespace {

using clock_type = std::chrono::steady_clock;

struct watchdog_state {
  // Declared, so that CAF does not build the state from the actor pointer
  // (an aggregate would take it for `home`).
  watchdog_state() = default;
  failure_api home;
  std::vector<watchdog_api> peers;
  std::vector<std::string> names;
  std::chrono::milliseconds period{1000}, limit{5000};
  std::optional<job::heartbeats> beats;
  bool done = false;
};

watchdog_api::behavior_type watchdog_actor(watchdog_api::stateful_pointer<watchdog_state> self,
                                           failure_api home) {
  self->set_exception_handler(exception_reason);
  self->state.home = std::move(home);
  return {
      [=](ping) { return pong{}; },
      [=](watch_peers& w) {
        auto& st = self->state;
        st.peers = std::move(w.peers);
        st.names = std::move(w.names);
        st.names.resize(st.peers.size(), "a peer");
        st.period = std::chrono::milliseconds(std::max<int64_t>(1, w.period_ms));
        st.limit = std::chrono::milliseconds(std::max<int64_t>(1, w.limit_ms));
        st.beats.emplace(int(st.peers.size()), st.limit, clock_type::now());
        self->send(self, watch_tick{});
      },
      [=](watch_tick) {
        auto& st = self->state;
        if (st.done) return;
        const auto now = clock_type::now();
        if (int p = st.beats->overdue(now); p >= 0) {
          st.done = true;
          self->send(st.home,
                     job_failed{fmt::format(
                         "{} has answered no heartbeat for {:.1f} s (stopped or hung)",
                         st.names[size_t(p)], double(st.beats->silent(p, now).count()) / 1e3)});
          return;
        }
        for (size_t p = 0; p < st.peers.size(); ++p)
          self->request(st.peers[p], st.limit, ping{})
              .then([=](pong) { self->state.beats->heard(int(p), clock_type::now()); },
                    [](caf::error&) {});  // silence is judged by the tick
        self->delayed_send(self, st.period, watch_tick{});
      },
  };
}

}  // namespace

watchdog_api spawn_watchdog(caf::actor_system& sys, failure_api home) {
  return sys.spawn(watchdog_actor, std::move(home));
}

void start_watchdog(caf::scoped_actor& self, const watchdog_api& watchdog,
                    std::vector<watchdog_api> peers, std::vector<std::string> names,
                    std::chrono::milliseconds period, std::chrono::milliseconds limit) {
  self->send(watchdog, watch_peers{std::move(peers), std::move(names), int64_t(period.count()),
                                   int64_t(limit.count())});
}

}  // namespace merak::actors
