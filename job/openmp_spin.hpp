#pragma once
// OpenMP's idle threads when several processes of a job share a host.
//
// When a parallel region ends, libgomp's worker threads spin before they
// sleep: 300,000 rounds by default (milliseconds), cut to 1,000 when the
// process runs more threads than the machine has cores. The processes of a
// job on one host together use every core for their compute (`merak train`
// gives each its share of the cores), but no process sees the others'
// threads, so each keeps the long spin, and its idle workers hold cores that
// the other processes' compute, and every process's tensor channel and
// control messages, need. So a process that shares its host with others of
// its job starts with GOMP_SPINCOUNT at the short spin, unless the user chose
// a policy (OMP_WAIT_POLICY or GOMP_SPINCOUNT). libgomp reads the variable
// once, as it loads: launchers put it in their children's environment, and
// `merak` sets it before it runs merak-full. Header only: `merak` uses it
// without linking the runtime.

#include <algorithm>
#include <cstdlib>
#include <string>

namespace merak::job {

inline constexpr const char* kopenmp_spin_variable = "GOMP_SPINCOUNT";
// libgomp's own spin for a process with more threads than cores.
inline constexpr const char* kshared_host_openmp_spin = "1000";

// Whether `addr` (MASTER_ADDR) names this host's loopback interface.
inline bool loopback_address(const std::string& addr) {
  return addr == "localhost" || addr == "::1" || addr == "[::1]" || addr.rfind("127.", 0) == 0;
}

// The job's processes on this host: as its launcher states them
// (LOCAL_WORLD_SIZE: merak launch, torchrun; OMPI_COMM_WORLD_LOCAL_SIZE:
// mpirun), and at least the whole job (WORLD_SIZE) where rank 0 listens on
// a loopback address (MASTER_ADDR), which only processes of this host can
// reach: `merak node` processes started one by one on a host each state 1.
// 1 when nothing says more or a value is not a positive number. `get(name)`
// returns the variable's value or null.
template <typename Getenv>
int processes_on_host(Getenv get) {
  const auto number = [&get](const char* name) {
    const char* v = get(name);
    if (!v || !*v) return 0;
    char* end = nullptr;
    const long n = std::strtol(v, &end, 10);
    return *end == '\0' && n >= 1 && n <= (1 << 20) ? int(n) : 0;
  };
  int stated = 1;
  for (const char* name : {"LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE"})
    if (const int n = number(name)) {
      stated = n;
      break;
    }
  const char* master = get("MASTER_ADDR");
  if (master && loopback_address(master)) return std::max(stated, number("WORLD_SIZE"));
  return stated;
}

// Whether a process with environment `get`, one of `processes` of its job
// on this host, should start with GOMP_SPINCOUNT=kshared_host_openmp_spin.
template <typename Getenv>
bool wants_short_openmp_spin(Getenv get, int processes) {
  const auto set = [&](const char* name) {
    const char* v = get(name);
    return v != nullptr && *v != '\0';
  };
  return processes > 1 && !set("OMP_WAIT_POLICY") && !set(kopenmp_spin_variable);
}

}  // namespace merak::job
