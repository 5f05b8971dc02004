#pragma once
// Rendezvous through the PMIx server that started this process (Open MPI's
// mpirun and the daemons it starts on every host): how a job over several
// hosts finds rank 0 with no MASTER_ADDR, MASTER_PORT or token given by hand.
//
// Collective (a PMIx fence): every rank of the job calls it once. Rank 0
// picks a free port and, when asked, a random job token, and publishes both
// through the server; every rank reads rank 0's host name from the server's
// map of the job's processes, and rank 0's port and token. The values travel
// only between the job's processes and the launcher's daemons (PMIx's own
// channel), never over the connections they protect.
//
// libpmix is loaded at run time, so merak starts where it is absent; the
// build needs only its header (Debian's libpmix-dev), and without it
// pmix_rendezvous_built() is false.

#include <chrono>
#include <string>

namespace merak::job {

struct pmix_rendezvous_result {
  int rank = -1;      // this process's rank in the job, as the server knows it
  std::string host;   // rank 0's host name, as the launcher named it
  int port = 0;       // where rank 0 listens
  std::string token;  // rank 0's token; empty when none was asked for
};

// Whether this build can rendezvous through PMIx.
bool pmix_rendezvous_built();

// Joins the job's rendezvous (see above). `make_token`: rank 0 makes and
// publishes a random token (every rank must pass the same value). Throws
// merak::error naming the step and PMIx's reason when libpmix cannot be
// loaded, the server refuses, or the fence does not complete within
// `timeout`.
pmix_rendezvous_result pmix_rendezvous(bool make_token, std::chrono::milliseconds timeout);

}  // namespace merak::job
