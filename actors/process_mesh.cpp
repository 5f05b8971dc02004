#include "actors/process_mesh.hpp"

#include <caf/io/all.hpp>

#include <unistd.h>

#include <sstream>
#include <thread>

#include <fmt/format.h>

#include "actors/messages.hpp"
#include "job/bootstrap.hpp"
#include "job/gate.hpp"
#include "core/error.hpp"

namespace merak::actors {
namespace {

using clock_type = std::chrono::steady_clock;

// Forwards joins to its process's home.
directory_api::behavior_type directory_actor(directory_api::pointer self, join_api home) {
  return {
      [=](join_job& j) { self->send(home, std::move(j)); },
  };
}

// The gate in front of this process's CAF port and the tunnels to the
// lower ranks' gates, for as long as the job's connections run.
struct mesh_gates {
  std::unique_ptr<job::gate_server> gate;
  std::vector<std::unique_ptr<job::gate_tunnel>> tunnels;
  // One deadline for all: with a lent actor system whose connections stay
  // open, the whole mesh closes within 2 s, not 2 s per link.
  ~mesh_gates() {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    for (auto& t : tunnels) t->shutdown(until);
    if (gate) gate->shutdown(until);
  }
};

struct address {
  std::string host;
  uint16_t port = 0;
  std::string name;  // the host's name
};

std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0 || !buf[0]) return "?";
  return buf;
}

}  // namespace

std::vector<process_view> join_processes(caf::actor_system& sys, caf::scoped_actor& home,
                                         job::bootstrap& b, process_view mine,
                                         const std::string& listen_addr,
                                         std::chrono::milliseconds timeout,
                                         std::shared_ptr<void>& links) {
  const int me = b.rank(), world = b.size();
  auto directory = sys.spawn(directory_actor, caf::actor_cast<join_api>(home));
  auto stop_directory = [&] { home->send_exit(directory, caf::exit_reason::user_shutdown); };
  std::vector<process_view> views(static_cast<size_t>(world));
  try {
    auto port = sys.middleman().publish(directory, 0, "127.0.0.1");
    if (!port)
      fail("process {}: cannot listen for the job's actors on loopback: {}", me,
           sys.render(port.error()));
    auto mesh = std::make_shared<mesh_gates>();
    links = mesh;
    mesh->gate = std::make_unique<job::gate_server>(listen_addr, 0, *port, b.credentials(), "mesh",
                                                     fmt::format("process {}", me));
    std::vector<address> peers;
    for (auto& blob :
         b.allgather(fmt::format("{} {} {}", listen_addr, mesh->gate->port(), host_name()))) {
      std::istringstream in(blob);
      address a;
      in >> a.host >> a.port >> a.name;
      MERAK_CHECK(in && a.port != 0, "process address '{}'", blob);
      peers.push_back(std::move(a));
    }
    const auto deadline = clock_type::now() + timeout;
    directory_api lead_directory;
    for (int j = 0; j < me; ++j) {
      const auto& peer = peers[size_t(j)];
      mesh->tunnels.push_back(std::make_unique<job::gate_tunnel>(
          peer.host, peer.port, b.credentials(), "mesh", timeout, fmt::format("process {}", me),
          fmt::format("process {} at {}:{}", j, peer.host, peer.port)));
      auto x = sys.middleman().remote_actor<directory_api>(
          "127.0.0.1", uint16_t(mesh->tunnels.back()->local_port()));
      if (!x)
        fail("process {}: cannot reach process {} at {}:{}: {}", me, j, peers[size_t(j)].host,
             peers[size_t(j)].port, sys.render(x.error()));
      if (j == 0) lead_directory = std::move(*x);
    }
    if (me == 0) {
      views[0] = std::move(mine);
      for (int joined = 1; joined < world;) {
        bool timed_out = false;
        home->receive(
            [&](join_job& j) {
              MERAK_CHECK(j.rank > 0 && j.rank < world && !views[size_t(j.rank)].home,
                          "join from process {}", j.rank);
              views[size_t(j.rank)] = {std::move(j.stages),
                                       std::move(j.reducers),
                                       std::move(j.home),
                                       std::move(j.watchdog),
                                       {}};
              ++joined;
            },
            caf::after(std::max(clock_type::duration(0), deadline - clock_type::now())) >>
                [&] { timed_out = true; });
        if (timed_out) {
          std::string missing;
          for (int r = 1; r < world; ++r)
            if (!views[size_t(r)].home)
              missing += (missing.empty() ? "" : ", ") + std::to_string(r);
          fail("process 0: processes {} did not join the job's actors within {} ms", missing,
               timeout.count());
        }
      }
      for (int r = 1; r < world; ++r)
        home->send(caf::actor_cast<join_api>(views[size_t(r)].home),
                   join_job{0, {}, {}, caf::actor{home}, views[0].watchdog});
    } else {
      home->send(lead_directory, join_job{me, std::move(mine.actors), std::move(mine.reducers),
                                          caf::actor{home}, std::move(mine.watchdog)});
      bool timed_out = false;
      home->receive(
          [&](join_job& j) {
            MERAK_CHECK(j.rank == 0, "join answered by process {}", j.rank);
            views[0].home = std::move(j.home);
            views[0].watchdog = std::move(j.watchdog);
          },
          caf::after(timeout) >> [&] { timed_out = true; });
      if (timed_out)
        fail("process {}: process 0 did not answer its join within {} ms", me, timeout.count());
    }
    for (int r = 0; r < world; ++r)
      views[size_t(r)].addr = fmt::format("{} ({})", peers[size_t(r)].name, peers[size_t(r)].host);
    b.barrier();
    mesh->gate->close_listener();
    sys.middleman().unpublish(directory, *port);
  } catch (...) {
    stop_directory();
    throw;
  }
  stop_directory();
  return views;
}

}  // namespace merak::actors
