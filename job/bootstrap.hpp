#pragma once
// Bootstrap: how the processes of one job find each other before any data
// moves (docs/comm-transport.md). Rank 0 listens on a TCP socket on the
// interface of MASTER_ADDR; every other rank connects to it, and both prove
// they hold the job token without sending it (job/auth.hpp, purpose
// "bootstrap"; the client's claim is its rank, the world size and the job
// id, job/identity.hpp), inside a
// TLS session when the job has certificates (job/tls.hpp). Rank 0
// runs the handshakes of all connecting peers at once, each with its own
// deadline. Afterwards the bootstrap offers an all-gather of small blobs
// (the UCX transport swaps worker addresses through it), a barrier, and a
// watch on the job's processes (dead_peer). It carries kilobytes, not
// tensors.
//
// Wire format after the handshake (integers little-endian, every message
// one frame: u64 length, then `length` bytes):
//   gather  (rank k -> rank 0) = the blob; (rank 0 -> rank k) = for each rank
//           in rank order: u64 length, blob.
//   notice  (rank 0 -> rank k, unsolicited) = u64 (2^63 | r): rank r went away
// A peer with the wrong token, another job's id, a different world size, a
// rank out of range or a rank already taken is refused with a verdict that
// says why and is dropped; rank 0 goes on waiting for the right peers until
// the timeout.

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "comm/control_plane.hpp"
#include "job/auth.hpp"

namespace merak::job {

struct bootstrap_options {
  int rank = -1;        // -1: from the environment
  int world_size = -1;  // -1: from the environment
  std::string addr;     // rendezvous host (rank 0's); empty: environment, else 127.0.0.1
  int port = -1;        // rendezvous port; -1: environment
  std::string token;    // job token; empty: MERAK_JOB_TOKEN, else the file MERAK_JOB_TOKEN_FILE
                        // names (job/auth.hpp read_token_file), else none (all must agree)
  // Where rank 0 listens. Empty: MERAK_BIND_ADDR, else `addr` itself (the
  // interface other hosts reach rank 0 by; 127.0.0.1 for loopback).
  std::string bind_addr;
  std::chrono::milliseconds timeout{60000};  // bound of every wait
  // TLS for the bootstrap and the job's gates (job/tls.hpp); empty:
  // MERAK_TLS_CERT / MERAK_TLS_KEY / MERAK_TLS_CA, else in clear.
  tls_files tls;
  // The job's id (job/identity.hpp); empty: MERAK_JOB_ID, else
  // "slurm-JOB.STEP" from SLURM_JOB_ID / SLURM_STEP_ID, else "ompi-ID" from
  // OMPI_MCA_ess_base_jobid, else "torchrun-ID" from TORCHELASTIC_RUN_ID,
  // else none. Rank 0 admits only ranks that claim the same id.
  std::string job_id;
  // Set by resolve_bootstrap: where `addr` came from, for the log ("MASTER_ADDR",
  // "the launcher's PMIx server", ...).
  std::string found_by;
};

// Reads one environment variable; nullptr when unset. Injected for tests.
using env_lookup = std::function<const char*(const char*)>;

// Fills what `given` leaves unset, in this order: the explicit value, then
// RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT, then OMPI_COMM_WORLD_RANK /
// OMPI_COMM_WORLD_SIZE, then SLURM_PROCID / SLURM_NTASKS. Without
// MASTER_ADDR: under Slurm the first host of SLURM_JOB_NODELIST, else
// 127.0.0.1 (an Open MPI job over several hosts is refused: it must name
// rank 0's host). Without MASTER_PORT: under Slurm or Open MPI a port
// derived from the job's id (rendezvous_port_of_job). The overload without
// `env` first asks the launcher's PMIx server (job/pmix_rendezvous.hpp)
// where an Open MPI job spans several hosts and no MASTER_ADDR is set
// (rendezvous_through_pmix): rank 0's host, a port rank 0 picked and, unless
// MERAK_JOB_TOKEN(_FILE) is set, a token rank 0 made. The token from
// MERAK_JOB_TOKEN; TLS's files from MERAK_TLS_*. Throws merak::error naming
// the variable when a value is
// malformed or out of range, or when rank, world size or port cannot be
// found. A world of size 1 needs no port.
bootstrap_options resolve_bootstrap(bootstrap_options given, const env_lookup& env);
bootstrap_options resolve_bootstrap(bootstrap_options given);  // the process environment
// Whether resolve_bootstrap(given) rendezvouses through PMIx (above): an
// Open MPI job (OMPI_MCA_ess_base_jobid, PMIX_NAMESPACE) whose local size
// is below its world size, with no address given or in MASTER_ADDR.
bool rendezvous_through_pmix(const bootstrap_options& given, const env_lookup& env);

// A joined job. Created by connect_bootstrap; used by one thread at a time.
// As a control plane (comm/control_plane.hpp): local_address is the local
// end of its bootstrap connection (rank 0: of a connection a peer made to
// it); dead_peer: rank 0 sees every rank's connection close and tells the
// others (a notice frame, see above), the other ranks see rank 0's
// connection close or read that notice, and a call made while an allgather
// runs on another thread skips the check.
class bootstrap : public comm::control_plane {
 public:
  // The job token and TLS context, for the handshakes of the job's other
  // connections (job/gate.hpp).
  virtual const job_credentials& credentials() const = 0;
};

// Joins the job described by `o` (resolved): rank 0 listens and admits the
// others, the others connect (retrying until rank 0 listens). Returns when
// all ranks joined. Throws merak::error on a refused token, a timeout (naming
// the ranks that did not join) or a socket error (naming address and port).
std::unique_ptr<bootstrap> connect_bootstrap(const bootstrap_options& options);

// The first host of a Slurm host list: "node[07-09,12],gpu1" -> "node07".
// Throws merak::error for a list that is not one.
std::string first_slurm_host(std::string_view list);
// A port in 20000..39999 derived from a job's id and step: every rank of
// the job computes the same one.
int rendezvous_port_of_job(const std::string& job_id, const std::string& step_id);

}  // namespace merak::job
