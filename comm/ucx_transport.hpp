#pragma once
// UCX transport: host memory between processes (and hosts), with UCP tagged
// messages (see transport.hpp for the contract; docs/comm-transport.md for
// the design, docs/results/distributed-runtime.md, "Transport choices", for
// the measurements behind the choices below). Built only when UCX is found
// (MERAK_WITH_UCX).
//
// - Tag layout: the 64-bit UCX tag is (source rank << 44) | user tag, matched
//   with a full mask, so a receive from peer p with tag t matches only p's
//   messages with tag t. User tags must be below 2^44 (checked); ranks below
//   2^20.
// - Set-up: every rank creates a UCP worker, all-gathers the worker addresses
//   through the bootstrap and opens an endpoint to every rank (itself
//   included), in the error mode of ucx_options (see ucx_error_mode).
// - Progress: the waiting thread progresses the worker. It spins for a short
//   while (options.spin, 2 ms; inside a collective options.collective_spin,
//   20 ms), then arms the worker and sleeps on its event fd, so an idle wait
//   burns no core. Every wait ends by the transport's timeout and
//   throws merak::error naming this rank, the peer and the tag; a peer known
//   to have failed (UCX peer errors, or the bootstrap's watch) is named at
//   once.
// - Transports: UCX reads UCX_TLS (and the other UCX_* variables) from the
//   environment, e.g. UCX_TLS=sm,self (shared memory; asked for without cma
//   unless ucx_options::cma) or UCX_TLS=tcp,self.
// - Threads: the endpoint is used by one thread at a time (worker in
//   serialized mode), e.g. its owner or a comm_stream.
// - Shut-down: the destructor flushes outstanding sends and closes the
//   endpoints, each step bounded by one second. After a failure (a peer
//   lost, a timeout) it does neither: it closes the endpoints by force without
//   progressing the worker (UCX 1.13's TCP transport could abort the process
//   while progressing a dead peer's socket). Call bootstrap::barrier()
//   before destroying the transports of a job, so that no rank closes while
//   another still receives from it.

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "comm/control_plane.hpp"
#include "comm/transport.hpp"

namespace merak::comm {

// Whether UCX reports a failed peer (UCP_ERR_HANDLING_MODE_PEER). UCX 1.13
// supports it only on transports that can detect failures: with shared
// memory only (UCX_TLS=sm or posix) endpoints cannot be opened in that mode,
// and with the default UCX_TLS peer mode moves the data over TCP loopback,
// several times slower than shared memory for large all-reduces; UCX 1.13
// also hits internal assertions in its TCP transport when a peer dies in
// this mode.
// Hence the default `none`: a dead peer is found through the bootstrap
// (make_ucx_transport with a shared_ptr) or by the wait's timeout, both
// naming a peer. `automatic` asks for peer mode and falls back to none for
// endpoints that cannot have it.
enum class ucx_error_mode { automatic, peer, none };

struct ucx_options {
  std::chrono::milliseconds timeout{60000};  // bound of every wait
  // Busy-poll this long before sleeping on the event fd: latency for short
  // waits, no core burnt for long ones. A wait that sleeps pays the event
  // fd's wake-up, so the spin covers a typical large message's wait
  // (docs/comm-transport.md, "Spinning before sleeping").
  std::chrono::microseconds spin{2000};
  // Then poll this much longer yielding the core between polls
  // (sched_yield) before sleeping; 0: sleep at once (docs/comm-transport.md).
  std::chrono::microseconds yield_spin{0};
  // Inside a collective (transport::begin_collective) a wait busy-polls at
  // least this long before sleeping: the peers are in the same collective,
  // so their part is due, and a rank that sleeps there pays a wake-up that
  // cma's rendezvous turns into milliseconds per all-reduce when the cores
  // are oversubscribed (docs/comm-transport.md, "Large messages by cma").
  // Waits of any length still end up sleeping.
  std::chrono::microseconds collective_spin{20000};
  ucx_error_mode error_mode = ucx_error_mode::none;
  // Single-copy shared memory for large messages between the processes of
  // one host. With UCX_TLS unset the ranks compare hosts when the transport
  // is made; all on one host (and error_mode not peer, which shared memory
  // cannot give), it asks UCX for posix,cma,self and, unless UCX_RNDV_THRESH
  // is set, a rendezvous threshold of cma_min_bytes: from that size on the
  // receiver reads the message straight from the sender's memory (cma,
  // process_vm_readv), smaller messages go through the shared-memory FIFO
  // (posix), whose copies leave the data in cache, which is faster for them
  // (docs/comm-transport.md, "Large messages by cma"). Ranks on several hosts
  // leave the choice to UCX. cma is left out when any rank cannot use it:
  // process_vm_readv refused on itself (e.g. by a seccomp filter), Yama's
  // ptrace_scope above 0, or a word of another rank it could not read (each
  // rank reads every other's when the transport is made).
  // false: shared memory without cma, as posix,self; a UCX_TLS that names
  // sm, shm or cma is then asked for without cma (ucx_tls_without_cma).
  bool cma = true;
  size_t cma_min_bytes = size_t{1} << 20;
};

// The UCX_TLS list `tls` without cma: "sm" and "shm" become "posix" (not
// sysv, far slower for the ring's chunks), "cma" is dropped, everything else kept in order.
// Empty when nothing changes (an empty list, a "^..." exclusion list, no shared memory named) or
// when only "self" would remain.
std::string ucx_tls_without_cma(std::string_view tls);

// Whether this process may read another's memory with process_vm_readv
// (ucx_options::cma): the call is not refused here (probed on this process)
// and Yama's ptrace_scope, if present, lets a sibling attach: 0, or 1 once
// this process has named any process of its user as a permitted tracer
// (prctl PR_SET_PTRACER_ANY, which this call then does, as Open MPI's
// shared-memory transport, and UCX's cma component in ucp_init, do;
// withdrawn when this call returns false, and by the transport when no
// transport of the process runs over cma); 2 and 3 do not. The transport
// still checks that every rank can read every other (a probe).
bool cma_usable();

// "automatic" | "peer" | "none"; throws merak::error naming the text.
ucx_error_mode parse_ucx_error_mode(const std::string& text);

// Collective over `b`: every rank of the bootstrap calls it. The transport
// has b.rank() and b.size(); `b` is needed only during the call. Throws
// merak::error naming the UCX call and status on failure.
std::unique_ptr<transport> make_ucx_transport(control_plane& b, const ucx_options& options = {});

// The same, and the transport keeps `b` to watch the job's processes: a wait
// fails within ~50 ms of the bootstrap learning that a peer's process went
// away (bootstrap::dead_peer), naming that peer, whatever the UCX error mode.
std::unique_ptr<transport> make_ucx_transport(std::shared_ptr<control_plane> b,
                                              const ucx_options& options = {});

// UCX_TLS as UCX will read it ("default" when unset), for benchmark reports.
std::string ucx_tls_setting();

// What a UCX transport asked UCX for, for reports: the transport list
// ("posix,cma,self", or UCX_TLS / "default" when it left the choice to UCX)
// and, when it set one, the rendezvous threshold ("posix,cma,self;
// rndv>=1048576"). Empty for a transport that is not UCX.
std::string ucx_setting_of(const transport& t);

}  // namespace merak::comm
