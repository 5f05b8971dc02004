#include "actors/watchdog.hpp"

#include <fmt/format.h>

#include <memory>
#include <optional>

#include "actors/messages.hpp"
#include "comm/heartbeat.hpp"

namespace merak::actors {
namespace {

using clock_type = std::chrono::steady_clock;

struct watchdog_state {
  caf::actor home;
  std::vector<caf::actor> peers;
  std::vector<std::string> names;
  std::chrono::milliseconds period{1000}, limit{5000};
  std::optional<comm::heartbeats> beats;
  bool done = false;
};

caf::behavior watchdog_actor(caf::stateful_actor<watchdog_state>* self, caf::actor home) {
  self->state.home = std::move(home);
  return {
      [=](ping_atom) { return pong_atom::value; },
      [=](watch_atom, std::vector<caf::actor>& peers, std::vector<std::string>& names,
          int64_t period_ms, int64_t limit_ms) {
        auto& st = self->state;
        st.peers = std::move(peers);
        st.names = std::move(names);
        st.period = std::chrono::milliseconds(period_ms);
        st.limit = std::chrono::milliseconds(limit_ms);
        st.beats.emplace(int(st.peers.size()), st.limit, clock_type::now());
        self->send(self, tick_atom::value);
      },
      [=](tick_atom) {
        auto& st = self->state;
        if (st.done) return;
        const auto now = clock_type::now();
        if (int p = st.beats->overdue(now); p >= 0) {
          st.done = true;
          self->send(
              st.home, failed_atom::value,
              fmt::format("{} has answered no heartbeat for {:.1f} s (stopped or hung)",
                          st.names[size_t(p)], double(st.beats->silent(p, now).count()) / 1e3));
          return;
        }
        for (size_t p = 0; p < st.peers.size(); ++p)
          self->request(st.peers[p], st.limit, ping_atom::value)
              .then([=](pong_atom) { self->state.beats->heard(int(p), clock_type::now()); },
                    [](caf::error&) {});  // silence is judged by the tick
        self->delayed_send(self, st.period, tick_atom::value);
      },
  };
}

}  // namespace

caf::actor spawn_watchdog(caf::actor_system& sys, caf::actor home) {
  return sys.spawn(watchdog_actor, std::move(home));
}

void start_watchdog(caf::scoped_actor& self, const caf::actor& watchdog,
                    std::vector<caf::actor> peers, std::vector<std::string> names,
                    std::chrono::milliseconds period, std::chrono::milliseconds limit) {
  self->send(watchdog, watch_atom::value, std::move(peers), std::move(names),
             int64_t(period.count()), int64_t(limit.count()));
}

}  // namespace merak::actors
