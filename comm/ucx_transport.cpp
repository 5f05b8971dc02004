#include "comm/ucx_transport.hpp"

#include <poll.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/uio.h>
#include <ucp/api/ucp.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "comm/network_interface.hpp"
#include "core/error.hpp"

namespace merak::comm {
namespace {

using clock_type = std::chrono::steady_clock;
constexpr int ktag_bits = 44;
constexpr uint64_t kuser_tag_mask = (uint64_t{1} << ktag_bits) - 1;

void check(ucs_status_t st, const char* call, int rank) {
  if (st != UCS_OK) fail("ucx rank {}: {} failed: {}", rank, call, ucs_status_string(st));
}

// RAII owners of the UCP handles.
struct config_deleter {
  void operator()(ucp_config_t* c) const { ucp_config_release(c); }
};
struct context_deleter {
  void operator()(ucp_context* c) const { ucp_cleanup(c); }
};
struct worker_deleter {
  void operator()(ucp_worker* w) const { ucp_worker_destroy(w); }
};
using config_ptr = std::unique_ptr<ucp_config_t, config_deleter>;
using context_ptr = std::unique_ptr<ucp_context, context_deleter>;
using worker_ptr = std::unique_ptr<ucp_worker, worker_deleter>;

// Worker address, released through its worker.
class worker_address {
 public:
  worker_address(ucp_worker_h w, int rank) : w_(w) {
    check(ucp_worker_get_address(w, &addr_, &len_), "ucp_worker_get_address", rank);
  }
  ~worker_address() { ucp_worker_release_address(w_, addr_); }
  worker_address(const worker_address&) = delete;
  worker_address& operator=(const worker_address&) = delete;
  std::string bytes() const { return {reinterpret_cast<const char*>(addr_), len_}; }

 private:
  ucp_worker_h w_;
  ucp_address_t* addr_ = nullptr;
  size_t len_ = 0;
};

// Yama ptrace_scope 1: the cma check declares any process of this user a
// permitted tracer of this one (PR_SET_PTRACER_ANY). That stays only while a
// transport of this process may run over cma: from its check to its choice,
// then while it runs over cma. When none does (another host, a peer that
// cannot use cma, the last such transport closed) it is withdrawn.
std::mutex ptracer_mu;
bool ptracer_declared = false;  // guarded by ptracer_mu
int cma_holds = 0;              // live cma_holds, guarded by ptracer_mu

void withdraw_unused_ptracer_locked() {
  if (ptracer_declared && cma_holds == 0) {
    ::prctl(PR_SET_PTRACER, 0, 0, 0, 0);
    ptracer_declared = false;
  }
}

// Yama's ptrace_scope, 0 without Yama.
int yama_ptrace_scope() {
  int scope = 0;
  if (std::ifstream f("/proc/sys/kernel/yama/ptrace_scope"); f && (f >> scope)) return scope;
  return 0;
}

// After ucp_init of a transport that runs without cma: UCX's cma component
// declares any process a tracer at ucp_init under scope 1 whatever UCX_TLS
// names (UCX 1.13); that declaration is withdrawn like merak's own.
void withdraw_ucx_ptracer() {
  std::lock_guard lock(ptracer_mu);
  if (yama_ptrace_scope() == 1) ptracer_declared = true;
  withdraw_unused_ptracer_locked();
}

// Keeps the declaration for one transport; made under ptracer_mu.
struct cma_hold {
  cma_hold() { ++cma_holds; }
  ~cma_hold() {
    std::lock_guard lock(ptracer_mu);
    --cma_holds;
    withdraw_unused_ptracer_locked();
  }
  cma_hold(const cma_hold&) = delete;
  cma_hold& operator=(const cma_hold&) = delete;
};

bool cma_usable_locked();
// cma_usable() for a transport: a hold while usable, else nothing (and no
// declaration left behind).
std::unique_ptr<cma_hold> hold_cma_if_usable() {
  std::lock_guard lock(ptracer_mu);
  if (!cma_usable_locked()) {
    withdraw_unused_ptracer_locked();
    return nullptr;
  }
  return std::make_unique<cma_hold>();
}

// What the operations and the error handler share with the transport; kept
// alive by every outstanding operation.
struct ucx_state {
  int rank = 0, size = 0;
  std::chrono::microseconds spin{2000}, yield_spin{0}, collective_spin{20000};
  int collective_depth = 0;       // begin_collective nesting
  std::unique_ptr<cma_hold> cma;  // set when this transport runs over cma; outlives the endpoints
  context_ptr context;
  worker_ptr worker;  // destroyed before the context (member order)
  int efd = -1;       // owned by the worker
  std::vector<ucp_ep_h> eps;
  struct peer_slot {
    ucx_state* state;
    int peer;
    ucs_status_t status = UCS_OK;  // set by the error handler
  };
  std::vector<std::unique_ptr<peer_slot>> peers;
  // Optional: the job's bootstrap, whose connections close when a process
  // goes away (bootstrap::dead_peer), checked every kwatch_period of a wait.
  std::shared_ptr<control_plane> watch;
  static constexpr std::chrono::milliseconds kwatch_period{50};
  static constexpr int kroot_cause_polls = 40;  // x 5 ms
  // Set once a wait or a call failed on a peer (UCX error, dead process,
  // timeout): shutting down then no longer progresses the worker (see
  // failed_job()).
  bool failed = false;
  // Set by transport::cancel from any thread: every wait fails with the
  // reason (read under the mutex once the flag is seen).
  std::atomic<bool> cancelled{false};
  std::mutex cancel_mu;
  std::string cancel_reason;

  // Whether the job has lost a peer: a failure seen by this transport, a
  // UCX peer error, or a process the bootstrap saw go away. Shutting down
  // such a job must not progress the worker: UCX 1.13's TCP transport can
  // then handle the dead socket's events and abort the process on an
  // internal assertion (tcp_ep.c:939 PUT_TX_WAITING_ACK, openucx/ucx#4676).
  bool failed_job() {
    if (failed || cancelled.load(std::memory_order_acquire)) return true;
    for (const auto& ps : peers)
      if (ps->status != UCS_OK) return failed = true;
    if (watch && watch->dead_peer() >= 0) return failed = true;
    return false;
  }

  // An operation failed for `reason` (a UCX status, a failed endpoint):
  // fails naming the process that died first if the bootstrap learns of one
  // within kroot_cause_polls (the failure is often a consequence, e.g. of a
  // survivor that exited on its own error and reset its connections), else
  // the reason. Asking the bootstrap also makes rank 0 tell the others.
  [[noreturn]] void fail_peer(const std::string& what, const std::string& reason) {
    failed = true;
    if (watch) {
      for (int i = 0; i < kroot_cause_polls && watch->dead_peer() < 0; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      if (const int dead = watch->dead_peer(); dead >= 0)
        fail("{}: peer {} went away (its process exited or closed the job; here: {})", what, dead,
             reason);
    }
    fail("{}: {}", what, reason);
  }
  [[noreturn]] void fail_status(const std::string& what, ucs_status_t st) {
    fail_peer(what, ucs_status_string(st));
  }

  // Fails (merak::error) after marking the job failed.
  template <typename... Args>
  [[noreturn]] void fail_job(fmt::format_string<Args...> f, Args&&... args) {
    failed = true;
    fail(f, std::forward<Args>(args)...);
  }

  ~ucx_state() { close_endpoints(); }

  // Progresses until nothing is left; returns how many events it handled.
  unsigned progress() {
    unsigned events = 0, n;
    while ((n = ucp_worker_progress(worker.get())) != 0) events += n;
    return events;
  }

  // Progresses until done() or the deadline; `what` describes the operation
  // for errors. Spins for `spin`, then sleeps on the event fd.
  template <typename Done>
  void wait(Done&& done, int peer, clock_type::time_point deadline, const std::string& what) {
    const auto spin_for = collective_depth > 0 ? std::max(spin, collective_spin) : spin;
    const auto spin_end = clock_type::now() + spin_for;
    const auto yield_end = spin_end + yield_spin;
    auto next_watch = clock_type::now() + kwatch_period;
    int busy_streak = 0;
    for (;;) {
      if (progress() != 0) busy_streak = 0;
      if (done()) return;
      if (cancelled.load(std::memory_order_acquire)) {
        failed = true;
        std::lock_guard lock(cancel_mu);
        fail("{}: cancelled: {}", what, cancel_reason);
      }
      // Any failed peer ends the wait: the job cannot complete without it,
      // and the peer we wait for may itself be stuck behind it. The
      // bootstrap's watch knows the root cause best (a survivor that exits on
      // its error makes UCX report it too), so it is asked first.
      const ucx_state::peer_slot* failed = nullptr;
      for (const auto& ps : peers)
        if (ps->status != UCS_OK) {
          failed = ps.get();
          break;
        }
      const auto now = clock_type::now();
      if (failed)
        fail_peer(what, fmt::format("connection to peer {} failed: {} (did it exit?)", failed->peer,
                                    ucs_status_string(failed->status)));
      if (watch && now >= next_watch) {
        next_watch = now + kwatch_period;
        if (const int dead = watch->dead_peer(); dead >= 0)
          fail_job("{}: peer {} went away (its process exited or closed the job)", what, dead);
      }
      if (now >= deadline) fail_job("{}: timed out (peer {} did not complete it)", what, peer);
      if (now < spin_end) continue;
      if (now < yield_end) {  // poll on, but let a runnable peer have this core
        sched_yield();
        continue;
      }
      const ucs_status_t st = ucp_worker_arm(worker.get());
      if (st == UCS_ERR_BUSY) {
        // Events pending: progress again. A worker that stays busy without
        // completing anything (a stopped peer's half-sent message) would
        // keep a core spinning: after a streak, back off for 1 ms per retry.
        if (++busy_streak > 64) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        continue;
      }
      busy_streak = 0;
      check(st, "ucp_worker_arm", rank);
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count();
      pollfd p{efd, POLLIN, 0};
      ::poll(&p, 1, static_cast<int>(std::clamp<int64_t>(left + 1, 1, 100)));
    }
  }

  // Closes every endpoint (flushing those whose peer did not fail, by force
  // the others), waiting at most a second in all. In a failed job every
  // endpoint is closed by force and the worker is not progressed at all
  // (failed_job()); UCX then drops what was in flight with the worker.
  void close_endpoints() {
    if (!worker) return;
    const bool abandon = failed_job();
    std::vector<void*> reqs;
    for (size_t p = 0; p < eps.size(); ++p) {
      if (!eps[p]) continue;
      ucp_request_param_t prm{};
      prm.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
      prm.flags = !abandon && peers[p]->status == UCS_OK ? 0 : UCP_EP_CLOSE_FLAG_FORCE;
      void* r = ucp_ep_close_nbx(eps[p], &prm);
      if (UCS_PTR_IS_PTR(r)) reqs.push_back(r);
      eps[p] = nullptr;
    }
    const auto deadline = clock_type::now() + std::chrono::seconds(1);
    for (void* r : reqs) {
      while (!abandon && ucp_request_check_status(r) == UCS_INPROGRESS &&
             clock_type::now() < deadline)
        progress();
      ucp_request_free(r);  // UCX finishes it (or drops it with the worker)
    }
  }
};

void on_peer_error(void* arg, ucp_ep_h, ucs_status_t status) {
  static_cast<ucx_state::peer_slot*>(arg)->status = status;
}

std::string describe(const ucx_state& s, const char* op, int peer, tag_t tag) {
  return fmt::format("ucx rank {}: {} peer {} (tag {})", s.rank, op, peer, tag);
}

class ucx_send final : public operation {
 public:
  ucx_send(std::shared_ptr<ucx_state> s, void* req, int peer, tag_t tag)
      : s_(std::move(s)), req_(req), peer_(peer), tag_(tag) {}
  ~ucx_send() override {
    if (!req_) return;
    if (ucp_request_check_status(req_) == UCS_INPROGRESS)
      ucp_request_cancel(s_->worker.get(), req_);
    ucp_request_free(req_);
  }
  bool test() override {
    s_->progress();
    return ucp_request_check_status(req_) != UCS_INPROGRESS;
  }
  void wait(clock_type::time_point deadline) override {
    const std::string what = describe(*s_, "send to", peer_, tag_);
    s_->wait([&] { return ucp_request_check_status(req_) != UCS_INPROGRESS; }, peer_, deadline,
             what);
    const ucs_status_t st = ucp_request_check_status(req_);
    if (st != UCS_OK) s_->fail_status(what, st);
  }

 private:
  std::shared_ptr<ucx_state> s_;
  void* req_;
  int peer_;
  tag_t tag_;
};

// Where UCX reports a receive's outcome (from its callback, inside
// progress); outlives the request.
struct recv_result {
  bool done = false;
  ucs_status_t status = UCS_INPROGRESS;
  size_t length = 0;
};

void on_recv(void*, ucs_status_t status, const ucp_tag_recv_info_t* info, void* user) {
  auto* r = static_cast<recv_result*>(user);
  r->status = status;
  if (info) r->length = info->length;
  r->done = true;
}

class ucx_recv final : public operation {
 public:
  ucx_recv(std::shared_ptr<ucx_state> s, int peer, tag_t tag, void* buf, size_t bytes)
      : s_(std::move(s)), peer_(peer), tag_(tag), bytes_(bytes), res_(new recv_result) {
    ucp_tag_recv_info_t info{};
    ucp_request_param_t prm{};
    prm.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE | UCP_OP_ATTR_FIELD_RECV_INFO |
                       UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                       UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
    prm.datatype = ucp_dt_make_contig(1);
    prm.recv_info.tag_info = &info;
    prm.cb.recv = on_recv;
    prm.user_data = res_;
    const uint64_t utag = uint64_t(peer_) << ktag_bits | tag_;
    void* r = ucp_tag_recv_nbx(s_->worker.get(), buf, bytes_, utag, ~uint64_t{0}, &prm);
    if (UCS_PTR_IS_ERR(r)) {
      delete res_;
      fail("{}: ucp_tag_recv_nbx: {}", describe(*s_, "receive from", peer_, tag_),
           ucs_status_string(UCS_PTR_STATUS(r)));
    }
    if (r == nullptr) {  // completed in place: no callback
      res_->done = true;
      res_->status = UCS_OK;
      res_->length = info.length;
    } else {
      req_ = r;
    }
  }

  ~ucx_recv() override {
    if (req_) {
      if (!res_->done) {
        // Withdraw it, so that UCX writes no more into the caller's buffer.
        ucp_request_cancel(s_->worker.get(), req_);
        const auto deadline = clock_type::now() + std::chrono::seconds(1);
        while (!res_->done && !s_->failed_job() && clock_type::now() < deadline) s_->progress();
      }
      ucp_request_free(req_);
      if (!res_->done) return;  // UCX may still call back: leak the result, not dangle
    }
    delete res_;
  }
  ucx_recv(const ucx_recv&) = delete;
  ucx_recv& operator=(const ucx_recv&) = delete;

  bool test() override {
    if (!res_->done) s_->progress();
    return res_->done;
  }

  void wait(clock_type::time_point deadline) override {
    const std::string what = describe(*s_, "receive from", peer_, tag_);
    if (!res_->done) s_->wait([&] { return res_->done; }, peer_, deadline, what);
    if (res_->status == UCS_ERR_MESSAGE_TRUNCATED)
      fail("{}: peer sent more than the {} bytes expected", what, bytes_);
    if (res_->status != UCS_OK) s_->fail_status(what, res_->status);
    if (res_->length != bytes_)
      fail("{}: peer sent {} bytes, {} expected", what, res_->length, bytes_);
  }

 private:
  std::shared_ptr<ucx_state> s_;
  int peer_;
  tag_t tag_;
  size_t bytes_;
  void* req_ = nullptr;
  recv_result* res_;  // owned; see the destructor
};

// A word every rank reads from the others before cma is chosen:
// cma_usable() tries process_vm_readv on this process only, and another
// process of the host may still refuse it (other credentials, another PID
// namespace), which would fail the first large message instead of choosing
// posix alone.
// Random per process, so that a pid of another namespace that happens to
// name a process of the same binary cannot pass for a peer.
const uint64_t kcma_probe = std::random_device{}() * uint64_t{0x100000001} ^ 0x6d6572616b636d61;

bool read_cma_probe(long pid, uintptr_t address, uint64_t expected) {
  uint64_t to = 0;
  iovec local{&to, sizeof to}, remote{reinterpret_cast<void*>(address), sizeof to};
  return ::process_vm_readv(static_cast<pid_t>(pid), &local, 1, &remote, 1, 0) ==
             ssize_t(sizeof to) &&
         to == expected;
}

bool cma_usable_locked() {
  if (const int scope = yama_ptrace_scope(); scope != 0) {
    // Scope 1 (Ubuntu's default) lets only a declared tracer attach; declare
    // any process of this user. Scopes 2 and 3 need privilege or forbid it.
    // Withdrawn when no transport of this process may use cma (cma_hold).
    if (scope != 1) return false;
    if (!ptracer_declared) {
      if (::prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0) != 0) return false;
      ptracer_declared = true;
    }
  }
  return read_cma_probe(::getpid(), reinterpret_cast<uintptr_t>(&kcma_probe), kcma_probe);
}

}  // namespace

bool cma_usable() {
  std::lock_guard lock(ptracer_mu);
  const bool usable = cma_usable_locked();
  if (!usable) withdraw_unused_ptracer_locked();
  return usable;
}

namespace {

// What the ranks swap to choose shared memory:
// "host\ncma-ok\npid\nprobe address\nprobe value".
struct host_entry {
  std::string host;
  bool cma = false;
  long pid = 0;
  uintptr_t probe = 0;
  uint64_t value = 0;
};

std::string encode_host_entry(const std::string& host, bool cma) {
  return host + "\n" + (cma ? "1" : "0") + "\n" + std::to_string(::getpid()) + "\n" +
         std::to_string(reinterpret_cast<uintptr_t>(&kcma_probe)) + "\n" +
         std::to_string(kcma_probe);
}

host_entry decode_host_entry(const std::string& s) {
  host_entry e;
  const size_t a = s.find('\n'), b = s.find('\n', a + 1), c = s.find('\n', b + 1);
  const size_t d = c == std::string::npos ? c : s.find('\n', c + 1);
  if (d == std::string::npos) return e;  // malformed: no cma, another "host"
  e.host = s.substr(0, a);
  e.cma = s.compare(a + 1, b - a - 1, "1") == 0;
  e.pid = std::atol(s.c_str() + b + 1);
  e.probe = static_cast<uintptr_t>(std::strtoull(s.c_str() + c + 1, nullptr, 10));
  e.value = std::strtoull(s.c_str() + d + 1, nullptr, 10);
  return e;
}

// This host and boot (hostname and the kernel's boot id): ranks with equal
// identities share memory.
// Whether this host has RDMA devices (InfiniBand, RoCE) for UCX.
bool has_rdma_devices() {
  std::error_code ec;
  std::filesystem::directory_iterator it("/sys/class/infiniband", ec);
  return !ec && it != std::filesystem::directory_iterator();
}

std::string host_identity() {
  char name[256] = {};
  ::gethostname(name, sizeof name - 1);
  std::string boot;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot;
  return std::string(name) + "/" + boot;
}

// Every rank must take the same branch below: with UCX_TLS unset (and an
// error mode other than peer) the ranks swap host identities before their
// worker addresses, otherwise they do not, and a rank on the other branch
// would read one exchange's bytes as the other's. One all-gather of each
// rank's branch and the settings behind it names the rank that differs.
void agree_on_negotiation(control_plane& b, bool negotiate, std::string_view tls,
                          ucx_error_mode mode) {
  const char* mode_name = mode == ucx_error_mode::peer   ? "peer"
                          : mode == ucx_error_mode::none ? "none"
                                                         : "automatic";
  const std::string mine = fmt::format("{}UCX_TLS={}, error mode {}", negotiate ? '1' : '0',
                                       tls.empty() ? "(unset)" : std::string(tls), mode_name);
  const auto all = b.allgather(mine);
  for (size_t p = 0; p < all.size(); ++p)
    if (all[p].empty() || all[p][0] != mine[0])
      fail(
          "ucx rank {}: rank {} runs with {} and this rank with {}: UCX_TLS set on some ranks and "
          "unset on others (or error mode peer on some) is not supported; give every rank the "
          "same UCX_TLS",
          b.rank(), p, all[p].empty() ? std::string("?") : all[p].substr(1), mine.substr(1));
}

class ucx_transport final : public transport {
 public:
  ucx_transport(control_plane& b, const ucx_options& options, std::shared_ptr<control_plane> watch)
      : s_(std::make_shared<ucx_state>()) {
    s_->watch = std::move(watch);
    timeout_ = options.timeout;
    s_->rank = b.rank();
    s_->size = b.size();
    s_->spin = options.spin;
    s_->yield_spin = options.yield_spin;
    s_->collective_spin = options.collective_spin;
    const int rank = s_->rank;

    ucp_config_t* cfg = nullptr;
    check(ucp_config_read(nullptr, nullptr, &cfg), "ucp_config_read (check the UCX_* variables)",
          rank);
    config_ptr config(cfg);
    // Detect dead peers within about a second (UCX's default is 20 s), also
    // on endpoints that carry no traffic; UCX_KEEPALIVE_INTERVAL overrides.
    if (!std::getenv("UCX_KEEPALIVE_INTERVAL"))
      ucp_config_modify(config.get(), "KEEPALIVE_INTERVAL", "1s");
    // Shared memory on one host (ucx_options::cma): with UCX_TLS unset,
    // posix for small messages and cma from cma_min_bytes on. Collectives:
    // every rank swaps its host identity and whether it can use cma here,
    // then (all on one host, all able) whether it could read every other
    // rank's probe word, in the same order on every rank.
    const char* tls = std::getenv("UCX_TLS");
    std::string chosen = options.cma ? std::string() : ucx_tls_without_cma(tls ? tls : "");
    std::string rndv_thresh;
    const bool negotiate = (!tls || !*tls) && options.error_mode != ucx_error_mode::peer;
    agree_on_negotiation(b, negotiate, tls ? tls : "", options.error_mode);
    bool one_host = false;
    if (negotiate) {
      std::vector<host_entry> ids;
      std::unique_ptr<cma_hold> hold = options.cma ? hold_cma_if_usable() : nullptr;
      for (const auto& s : b.allgather(encode_host_entry(host_identity(), hold != nullptr)))
        ids.push_back(decode_host_entry(s));
      one_host =
          std::all_of(ids.begin(), ids.end(), [&](auto& e) { return e.host == ids.front().host; });
      bool cma = std::all_of(ids.begin(), ids.end(), [](auto& e) { return e.cma; });
      if (one_host && cma) {
        bool reached = true;
        for (int p = 0; p < s_->size; ++p)
          if (p != rank)
            reached = reached && read_cma_probe(ids[p].pid, ids[p].probe, ids[p].value);
        const auto all = b.allgather(reached ? "1" : "0");
        cma = std::all_of(all.begin(), all.end(), [](auto& r) { return r == "1"; });
      }
      if (one_host && cma) s_->cma = std::move(hold);  // else withdrawn here
      if (one_host) {
        chosen = cma ? "posix,cma,self" : "posix,self";
        if (cma && !std::getenv("UCX_RNDV_THRESH")) {
          rndv_thresh = std::to_string(options.cma_min_bytes);
          check(ucp_config_modify(config.get(), "RNDV_THRESH", rndv_thresh.c_str()),
                ("ucp_config_modify RNDV_THRESH=" + rndv_thresh).c_str(), rank);
        }
      }
    }
    if (!chosen.empty())
      check(ucp_config_modify(config.get(), "TLS", chosen.c_str()),
            ("ucp_config_modify TLS=" + chosen).c_str(), rank);
    setting_ = chosen.empty() ? ucx_tls_setting() : chosen;
    // Between hosts over TCP, UCX opens listeners on every interface it
    // finds: keep it to the job's network, the interface this process
    // reaches rank 0 by (UCX_NET_DEVICES overrides; hosts with RDMA devices
    // are left to UCX, whose devices there are not interfaces).
    if (size_t(s_->size) > 1 && !one_host && !std::getenv("UCX_NET_DEVICES") &&
        !has_rdma_devices()) {
      const std::string dev = interface_of(b.local_address());
      if (!dev.empty() && dev != "lo") {
        check(ucp_config_modify(config.get(), "NET_DEVICES", dev.c_str()),
              ("ucp_config_modify NET_DEVICES=" + dev).c_str(), rank);
        setting_ += ";net=" + dev;
      }
    }
    if (!rndv_thresh.empty()) setting_ += ";rndv>=" + rndv_thresh;
    ucp_params_t params{};
    params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_ESTIMATED_NUM_EPS;
    params.features = UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP;
    params.estimated_num_eps = static_cast<size_t>(s_->size);
    ucp_context_h ctx = nullptr;
    check(ucp_init(&params, config.get(), &ctx), "ucp_init", rank);
    s_->context.reset(ctx);
    if (!chosen.empty() && chosen.find("cma") == std::string::npos) withdraw_ucx_ptracer();

    ucp_worker_params_t wp{};
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wp.thread_mode = UCS_THREAD_MODE_SERIALIZED;
    ucp_worker_h w = nullptr;
    check(ucp_worker_create(ctx, &wp, &w), "ucp_worker_create", rank);
    s_->worker.reset(w);
    check(ucp_worker_get_efd(w, &s_->efd), "ucp_worker_get_efd", rank);

    connect_peers(b, w, options);
    // Everyone's endpoints exist before anyone sends.
    b.barrier();
  }

  // Swaps worker addresses over the control plane and opens an endpoint to
  // every rank (this one included).
  void connect_peers(control_plane& b, ucp_worker_h w, const ucx_options& options) {
    const int rank = s_->rank;
    std::vector<std::string> addrs;
    {
      worker_address mine(w, rank);
      addrs = b.allgather(mine.bytes());
    }
    s_->eps.assign(s_->size, nullptr);
    for (int p = 0; p < s_->size; ++p) {
      s_->peers.push_back(
          std::make_unique<ucx_state::peer_slot>(ucx_state::peer_slot{s_.get(), p}));
      ucp_ep_params_t ep{};
      ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                      UCP_EP_PARAM_FIELD_ERR_HANDLER;
      ep.address = reinterpret_cast<const ucp_address_t*>(addrs[p].data());
      ep.err_mode = options.error_mode == ucx_error_mode::none ? UCP_ERR_HANDLING_MODE_NONE
                                                               : UCP_ERR_HANDLING_MODE_PEER;
      ep.err_handler.cb = on_peer_error;
      ep.err_handler.arg = s_->peers.back().get();
      ucs_status_t st = ucp_ep_create(w, &ep, &s_->eps[p]);
      if (st == UCS_ERR_UNREACHABLE && options.error_mode == ucx_error_mode::automatic) {
        ep.err_mode = UCP_ERR_HANDLING_MODE_NONE;
        st = ucp_ep_create(w, &ep, &s_->eps[p]);
      }
      if (st != UCS_OK)
        fail("ucx rank {}: cannot open an endpoint to peer {}: {} (UCX_TLS={})", rank, p,
             ucs_status_string(st), ucx_tls_setting());
    }
  }

  ~ucx_transport() override {
    // Flush what this rank sent, bounded; the endpoints close in ~ucx_state
    // once the last operation handle is gone. Not in a failed job (see
    // ucx_state::failed_job).
    if (s_->failed_job()) return;
    ucp_request_param_t prm{};
    void* r = ucp_worker_flush_nbx(s_->worker.get(), &prm);
    if (UCS_PTR_IS_PTR(r)) {
      const auto deadline = clock_type::now() + std::chrono::seconds(1);
      while (ucp_request_check_status(r) == UCS_INPROGRESS && clock_type::now() < deadline)
        s_->progress();
      ucp_request_free(r);
    }
  }

  int rank() const override { return s_->rank; }
  int size() const override { return s_->size; }
  std::string name() const override { return "ucx"; }
  const std::string& setting() const { return setting_; }
  void cancel(const std::string& why) override {
    {
      std::lock_guard lock(s_->cancel_mu);
      if (s_->cancelled.load()) return;
      s_->cancel_reason = why;
    }
    s_->cancelled.store(true, std::memory_order_release);
  }
  int arm_event_fd() override {
    if (s_->progress() != 0) return kprogress;
    if (ucp_worker_arm(s_->worker.get()) != UCS_OK) return kprogress;  // BUSY: events pending
    return s_->efd;
  }
  void begin_collective() override { ++s_->collective_depth; }
  void end_collective() override { --s_->collective_depth; }

  completion isend(int peer, tag_t tag, const void* buf, size_t bytes) override {
    check_args(peer, tag, "send to");
    ucp_request_param_t prm{};
    prm.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE;
    prm.datatype = ucp_dt_make_contig(1);
    const uint64_t utag = uint64_t(s_->rank) << ktag_bits | tag;
    void* r = ucp_tag_send_nbx(s_->eps[peer], buf, bytes, utag, &prm);
    if (UCS_PTR_IS_ERR(r)) s_->fail_status(describe(*s_, "send to", peer, tag), UCS_PTR_STATUS(r));
    if (peer != s_->rank) count_sent(bytes);
    if (r == nullptr) return {};
    return {std::make_shared<ucx_send>(s_, r, peer, tag), timeout_};
  }

  completion irecv(int peer, tag_t tag, void* buf, size_t bytes) override {
    check_args(peer, tag, "receive from");
    return {std::make_shared<ucx_recv>(s_, peer, tag, buf, bytes), timeout_};
  }

 private:
  void check_args(int peer, tag_t tag, const char* what) {
    if (peer < 0 || peer >= s_->size)
      fail("ucx rank {}: {} peer {}: no such rank (group of {})", s_->rank, what, peer, s_->size);
    if (tag > kuser_tag_mask)
      fail("ucx rank {}: {} peer {}: tag {} does not fit in {} bits", s_->rank, what, peer, tag,
           ktag_bits);
    if (s_->peers[peer]->status != UCS_OK)
      s_->fail_peer(fmt::format("ucx rank {}: {} peer {} (tag {})", s_->rank, what, peer, tag),
                    fmt::format("the connection to peer {} failed earlier: {}", peer,
                                ucs_status_string(s_->peers[peer]->status)));
  }

  std::shared_ptr<ucx_state> s_;
  std::string setting_;
};

}  // namespace

std::unique_ptr<transport> make_ucx_transport(control_plane& b, const ucx_options& options) {
  if (b.size() > (1 << 20)) fail("ucx: {} ranks (at most 2^20)", b.size());
  return std::make_unique<ucx_transport>(b, options, nullptr);
}

std::unique_ptr<transport> make_ucx_transport(std::shared_ptr<control_plane> b,
                                              const ucx_options& options) {
  if (!b) fail("ucx: no bootstrap");
  if (b->size() > (1 << 20)) fail("ucx: {} ranks (at most 2^20)", b->size());
  return std::make_unique<ucx_transport>(*b, options, b);
}

ucx_error_mode parse_ucx_error_mode(const std::string& text) {
  if (text == "automatic") return ucx_error_mode::automatic;
  if (text == "peer") return ucx_error_mode::peer;
  if (text == "none") return ucx_error_mode::none;
  fail("ucx error mode '{}': expected automatic, peer or none", text);
}

std::string ucx_tls_without_cma(std::string_view tls) {
  if (tls.empty() || tls.front() == '^') return {};
  std::vector<std::string> out;
  bool changed = false;
  auto add = [&](std::string_view t) {
    if (std::find(out.begin(), out.end(), t) == out.end()) out.emplace_back(t);
  };
  size_t at = 0;
  while (at <= tls.size()) {
    const size_t end = std::min(tls.find(',', at), tls.size());
    const std::string_view t = tls.substr(at, end - at);
    at = end + 1;
    if (t == "sm" || t == "shm") {
      add("posix"), changed = true;
    } else if (t == "cma") {
      changed = true;
    } else if (!t.empty()) {
      add(t);
    }
  }
  if (!changed || std::all_of(out.begin(), out.end(), [](auto& t) { return t == "self"; }))
    return {};
  std::string joined;
  for (auto& t : out) joined += (joined.empty() ? "" : ",") + t;
  return joined;
}

std::string ucx_setting_of(const transport& t) {
  const auto* u = dynamic_cast<const ucx_transport*>(&t);
  return u ? u->setting() : std::string();
}

std::string ucx_tls_setting() {
  const char* s = std::getenv("UCX_TLS");
  return s && *s ? s : "default";
}

}  // namespace merak::comm
