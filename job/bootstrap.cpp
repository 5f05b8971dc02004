#include "job/bootstrap.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <utility>

#include "core/error.hpp"
#include "job/auth.hpp"
#include "job/identity.hpp"
#include "job/pmix_rendezvous.hpp"
#include "job/socket_io.hpp"

namespace merak::job {
namespace {

using clock_type = net_clock;
constexpr uint64_t kmax_frame = uint64_t{1} << 30;  // after admission
constexpr uint64_t knotice = uint64_t{1} << 63;     // length field of a notice
constexpr const char* kpurpose = "bootstrap";


class tcp_bootstrap final : public bootstrap {
 public:
  tcp_bootstrap(const bootstrap_options& options)
      : options_(options), creds_{options.token, make_tls(options.tls)} {
    self_ = fmt::format("bootstrap rank {}", options.rank);
    where_ = fmt::format("{}:{}", options.addr, options.port);
    if (options.world_size == 1) return;
    if (options.rank == 0)
      admit();
    else
      join();
  }

  int rank() const override { return options_.rank; }
  int size() const override { return options_.world_size; }
  const job_credentials& credentials() const override { return creds_; }

  std::string local_address() const override {
    int fd = -1;
    if (options_.rank == 0) {
      for (auto& p : peers_)
        if (p) fd = p.fd();
    } else {
      fd = root_.fd();
    }
    sockaddr_in a{};
    socklen_t len = sizeof a;
    if (fd < 0 || ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) return "127.0.0.1";
    char text[INET_ADDRSTRLEN] = {};
    ::inet_ntop(AF_INET, &a.sin_addr, text, sizeof text);
    return text;
  }

  int dead_peer() override {
    if (dead_ >= 0 || options_.world_size == 1) return dead_;
    std::unique_lock lock(mu_, std::try_to_lock);
    if (!lock.owns_lock()) return dead_;
    if (options_.rank == 0) {
      for (int k = 1; k < options_.world_size; ++k)
        if (peers_[k] && peer_closed(peers_[k])) {
          dead_ = k;
          // Best effort: tell the others, who cannot see rank k's sockets.
          for (int j = 1; j < options_.world_size; ++j) {
            if (j == k || !peers_[j]) continue;
            std::string f;
            put_u64(f, knotice | uint64_t(k));
            size_t sent = 0;
            peers_[j].write_some(f.data(), f.size(), sent);
          }
          break;
        }
    } else if (root_) {
      // A notice precedes rank 0's own end of stream: read it first.
      char b[8];
      size_t n = 0;
      if (root_.peek_some(b, 8, n) == stream::io::done && n == 8 && (get_le(b, 8) & knotice)) {
        root_.read_some(b, 8, n);
        dead_ = static_cast<int>(get_le(b, 8) & ~knotice);
      } else if (peer_closed(root_)) {
        dead_ = 0;
      }
    }
    return dead_;
  }

  std::vector<std::string> allgather(const std::string& mine) override {
    std::lock_guard lock(mu_);
    const int P = options_.world_size;
    if (P == 1) return {mine};
    const auto deadline = clock_type::now() + options_.timeout;
    std::vector<std::string> all(P);
    if (options_.rank == 0) {
      all[0] = mine;
      for (int k = 1; k < P; ++k)
        all[k] = recv_frame(peers_[k], kmax_frame, deadline, self_, who(k));
      std::string out;
      for (auto& b : all) {
        put_u64(out, b.size());
        out += b;
      }
      for (int k = 1; k < P; ++k) send_frame(peers_[k], out, deadline, self_, who(k));
      return all;
    }
    send_frame(root_, mine, deadline, self_, root_name());
    std::string in = recv_checked(root_, deadline, root_name());
    size_t pos = 0;
    for (int k = 0; k < P; ++k) {
      if (in.size() - pos < 8) fail("{}: malformed all-gather reply from rank 0", self_);
      const uint64_t n = get_le(in.data() + pos, 8);
      pos += 8;
      if (in.size() - pos < n) fail("{}: malformed all-gather reply from rank 0", self_);
      all[k] = in.substr(pos, n);
      pos += n;
    }
    return all;
  }

 private:
  static std::string who(int k) { return fmt::format("rank {}", k); }
  std::string root_name() const { return fmt::format("rank 0 at {}", where_); }

  // Rank 0: listen, admit world_size-1 peers that prove the token. Peers
  // are authenticated concurrently, each within a few seconds, so silent
  // connections cannot hold up the job's own.
  void admit() {
    const auto deadline = clock_type::now() + options_.timeout;
    unique_fd lst;
    try {
      lst = listen_tcp(options_.bind_addr, options_.port, self_);
    } catch (const error& e) {
      fail(
          "{}; rank 0 listens on MASTER_ADDR's interface, so it must run on the host MASTER_ADDR "
          "names (MERAK_BIND_ADDR picks another address)",
          e.what());
    }
    peers_.resize(options_.world_size);
    auth_acceptor acceptor(lst.get(), creds_, kpurpose, std::chrono::milliseconds(5000),
                           std::max<size_t>(64, 2 * size_t(options_.world_size)));
    int k = -1;
    auto decide = [&](const std::string& payload) { return check_claim(payload, k); };
    // decide() and the admission come from one call of next(): `k` is the
    // admitted peer's rank.
    for (int joined = 1; joined < options_.world_size; ++joined) {
      auto a = acceptor.next(deadline, decide);
      if (!a) {
        std::string missing;
        for (int r = 1; r < options_.world_size; ++r)
          if (!peers_[r]) missing += fmt::format("{}{}", missing.empty() ? "" : ", ", r);
        fail("{}: ranks {} did not join within {} ms at {}:{}{}", self_, missing,
             options_.timeout.count(), options_.bind_addr, options_.port,
             acceptor.dropped()
                 ? fmt::format(" ({} connections refused or silent)", acceptor.dropped())
                 : "");
      }
      peers_[k] = std::move(a->s);
    }
  }

  // The reason a peer's claim is refused, or "" with its rank in `k`.
  std::string check_claim(const std::string& payload, int& k) const {
    bootstrap_claim c;
    try {
      c = decode_claim(payload);
    } catch (const error& e) {
      return e.what();
    }
    if (c.job_id != options_.job_id)
      return fmt::format("this process belongs to job '{}', rank 0 runs job '{}' (another job on "
                         "this port?)",
                         c.job_id, options_.job_id);
    if (c.world_size != options_.world_size)
      return fmt::format("world size {} differs from rank 0's {}", c.world_size,
                         options_.world_size);
    if (c.rank < 1 || c.rank >= options_.world_size)
      return fmt::format("rank {} out of range 1..{}", c.rank, options_.world_size - 1);
    if (peers_[static_cast<size_t>(c.rank)]) return fmt::format("rank {} already joined", c.rank);
    k = static_cast<int>(c.rank);
    return {};
  }

  // Ranks > 0: connect to rank 0 (retrying while it is not yet listening)
  // and run the handshake: each side proves it holds the token.
  void join() {
    const auto deadline = clock_type::now() + options_.timeout;
    sockaddr_in a = resolve_ipv4(options_.addr, options_.port, "MASTER_ADDR");
    try {
      root_ = connect_authenticated(a, creds_, kpurpose, encode_claim({options_.rank, options_.world_size, options_.job_id}),
                                    deadline, self_, root_name());
    } catch (const error& e) {
      const std::string what = e.what();
      if (what.find("not reachable") == std::string::npos) throw;
      fail("{}; check MASTER_ADDR and MASTER_PORT, and that rank 0 runs", what);
    }
  }

  // Reads a frame, turning rank 0's notice into an error naming the rank.
  std::string recv_checked(stream& s, clock_type::time_point deadline, const std::string& who) {
    char len[8];
    read_all(s, len, 8, deadline, self_, who);
    const uint64_t n = get_le(len, 8);
    if (n & knotice) {
      dead_ = static_cast<int>(n & ~knotice);
      fail("{}: rank {} went away (reported by rank 0)", self_, dead_);
    }
    if (n > kmax_frame)
      fail("{}: {} sent a frame of {} bytes (at most {} allowed)", self_, who, n, kmax_frame);
    std::string body(n, '\0');
    read_all(s, body.data(), n, deadline, self_, who);
    return body;
  }

  bootstrap_options options_;
  std::string self_, where_;
  std::mutex mu_;  // allgather vs dead_peer
  std::atomic<int> dead_{-1};
  job_credentials creds_;
  std::vector<stream> peers_;  // rank 0: connection to each rank
  stream root_;                // ranks > 0: connection to rank 0
};

// Parses a non-negative integer, or throws naming the variable.
int parse_int(const char* s, const char* var, int lo, int hi) {
  char* end = nullptr;
  errno = 0;
  long v = std::strtol(s, &end, 10);
  if (!*s || *end || errno || v < lo || v > hi)
    fail("bootstrap: {}='{}' is not an integer in {}..{}", var, s, lo, hi);
  return static_cast<int>(v);
}

}  // namespace

std::string first_slurm_host(std::string_view list) {
  auto bad = [&]() -> std::string {
    fail("bootstrap: SLURM_JOB_NODELIST '{}' is not a Slurm host list", list);
  };
  // The first entry: up to a comma outside brackets.
  size_t end = 0;
  for (int depth = 0; end < list.size(); ++end) {
    if (list[end] == '[') ++depth;
    if (list[end] == ']') --depth;
    if (list[end] == ',' && depth == 0) break;
  }
  std::string_view entry = list.substr(0, end);
  if (entry.empty()) return bad();
  std::string host;
  while (!entry.empty()) {
    const size_t open = entry.find('[');
    host += entry.substr(0, open);
    if (open == std::string_view::npos) break;
    const size_t close = entry.find(']', open);
    if (close == std::string_view::npos) return bad();
    // The first number of the first range, zero padding kept: "01-04,07" -> "01".
    std::string_view range = entry.substr(open + 1, close - open - 1);
    const size_t stop = range.find_first_of("-,");
    std::string_view first_number = range.substr(0, stop);
    if (first_number.empty() ||
        first_number.find_first_not_of("0123456789") != std::string_view::npos)
      return bad();
    host += first_number;
    entry.remove_prefix(close + 1);
  }
  if (host.empty()) return bad();
  return host;
}

int rendezvous_port_of_job(const std::string& job_id, const std::string& step_id) {
  uint64_t h = 1469598103934665603ULL;  // FNV-1a: the same on every rank
  for (char c : job_id + "." + step_id) h = (h ^ uint8_t(c)) * 1099511628211ULL;
  return 20000 + int(h % 20000);
}

bootstrap_options resolve_bootstrap(bootstrap_options o, const env_lookup& env) {
  auto first = [&](std::initializer_list<const char*> vars, const char*& which) -> const char* {
    for (const char* v : vars)
      if (const char* s = env(v); s && *s) {
        which = v;
        return s;
      }
    return nullptr;
  };
  const char* rank_src = "the explicit rank";
  if (o.rank < 0) {
    const char* s = first({"RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID"}, rank_src);
    if (!s) fail("bootstrap: no rank given (flag, RANK, OMPI_COMM_WORLD_RANK or SLURM_PROCID)");
    o.rank = parse_int(s, rank_src, 0, 1 << 20);
  }
  const char* size_src = "the explicit world size";
  if (o.world_size < 0) {
    const char* s = first({"WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "SLURM_NTASKS"}, size_src);
    if (!s)
      fail(
          "bootstrap: no world size given (flag, WORLD_SIZE, OMPI_COMM_WORLD_SIZE or "
          "SLURM_NTASKS)");
    o.world_size = parse_int(s, size_src, 1, 1 << 20);
  }
  if (o.world_size < 1)
    fail("bootstrap: world size {} ({}) must be at least 1", o.world_size, size_src);
  if (o.rank >= o.world_size)
    fail("bootstrap: rank {} (from {}) is not below the world size {} (from {})", o.rank, rank_src,
         o.world_size, size_src);
  const char* nodes_src = nullptr;
  const char* slurm_nodes = first({"SLURM_JOB_NODELIST", "SLURM_NODELIST"}, nodes_src);
  const char* slurm_job = env("SLURM_JOB_ID");
  const char* ompi_job = env("OMPI_MCA_ess_base_jobid");
  if (!o.addr.empty()) {
    if (o.found_by.empty()) o.found_by = "given";
  } else {
    const char* s = env("MASTER_ADDR");
    if (s && *s) {
      o.addr = s;
      o.found_by = "MASTER_ADDR";
    } else if (slurm_nodes && slurm_job) {
      o.addr = first_slurm_host(slurm_nodes);  // srun starts rank 0 on the first node
      o.found_by = fmt::format("the first host of {}", nodes_src);
    } else {
      const char* local = env("OMPI_COMM_WORLD_LOCAL_SIZE");
      if (ompi_job && local && o.world_size > 1 &&
          parse_int(local, "OMPI_COMM_WORLD_LOCAL_SIZE", 1, 1 << 20) < o.world_size)
        fail(
            "bootstrap: an Open MPI job over several hosts needs rank 0's address: run mpirun "
            "-x MASTER_ADDR=HOST (the host of rank 0) -x MASTER_PORT=PORT");
      o.addr = "127.0.0.1";
      o.found_by = "loopback (one host)";
    }
  }
  if (o.port < 0) {
    if (const char* s = env("MASTER_PORT"); s && *s) {
      o.port = parse_int(s, "MASTER_PORT", 1, 65535);
    } else if (slurm_job || ompi_job) {
      // Every rank derives the same port from its job's id (and Slurm's
      // step), so a plain `srun merak ...` or `mpirun merak ...` needs no
      // MASTER_PORT.
      const char* step = env("SLURM_STEP_ID");
      o.port =
          rendezvous_port_of_job(slurm_job ? slurm_job : ompi_job, slurm_job && step ? step : "0");
    } else if (o.world_size > 1) {
      fail("bootstrap: no rendezvous port (flag or MASTER_PORT) for a world of {}", o.world_size);
    }
  } else if (o.port == 0 || o.port > 65535) {
    fail("bootstrap: port {} is not in 1..65535", o.port);
  }
  if (o.job_id.empty()) {
    // The launcher's id of this job: every rank of it sees the same one.
    if (const char* s = env("MERAK_JOB_ID"); s && *s) {
      o.job_id = s;
      check_job_id(o.job_id, "MERAK_JOB_ID");
    } else if (slurm_job) {
      const char* step = env("SLURM_STEP_ID");
      o.job_id = fmt::format("slurm-{}.{}", slurm_job, step && *step ? step : "0");
    } else if (ompi_job) {
      o.job_id = fmt::format("ompi-{}", ompi_job);
    } else if (const char* t = env("TORCHELASTIC_RUN_ID"); t && *t) {
      o.job_id = fmt::format("torchrun-{}", t);
    }
  }
  check_job_id(o.job_id, "the job id");
  if (o.token.empty()) {
    if (const char* s = env("MERAK_JOB_TOKEN"); s && *s)
      o.token = s;
    else if (const char* f = env("MERAK_JOB_TOKEN_FILE"); f && *f)
      o.token = read_token_file(f);
  }
  if (o.tls.enabled())
    check_complete(o.tls, "--tls-cert, --tls-key and --tls-ca");
  else
    o.tls = tls_files_from_env(env);
  if (o.bind_addr.empty()) {
    if (const char* s = env("MERAK_BIND_ADDR"); s && *s)
      o.bind_addr = s;
    else
      o.bind_addr = (o.addr == "127.0.0.1" || o.addr == "localhost") ? "127.0.0.1" : o.addr;
  }
  if (o.timeout.count() <= 0) fail("bootstrap: timeout {} ms must be positive", o.timeout.count());
  // Without a token any process that reaches the port may join: only
  // where nothing but this host can reach it.
  const bool loopback = o.addr == "127.0.0.1" || o.addr == "localhost";
  if (o.world_size > 1 && o.token.empty() && (!loopback || o.bind_addr != "127.0.0.1"))
    fail(
        "bootstrap: a job reachable from other hosts (rendezvous {}, listening on {}) needs a job "
        "token: set MERAK_JOB_TOKEN on every process (merak launch and merak node set one)",
        o.addr, o.bind_addr);
  return o;
}

bool rendezvous_through_pmix(const bootstrap_options& given, const env_lookup& env) {
  auto set = [&](const char* v) {
    const char* s = env(v);
    return s && *s;
  };
  if (!given.addr.empty() || set("MASTER_ADDR") || !set("PMIX_NAMESPACE") ||
      !set("OMPI_MCA_ess_base_jobid") || !set("OMPI_COMM_WORLD_LOCAL_SIZE") ||
      !set("OMPI_COMM_WORLD_SIZE"))
    return false;
  return parse_int(env("OMPI_COMM_WORLD_LOCAL_SIZE"), "OMPI_COMM_WORLD_LOCAL_SIZE", 1, 1 << 20) <
         parse_int(env("OMPI_COMM_WORLD_SIZE"), "OMPI_COMM_WORLD_SIZE", 1, 1 << 20);
}

bootstrap_options resolve_bootstrap(bootstrap_options given) {
  const env_lookup env = [](const char* v) { return std::getenv(v); };
  auto set = [&](const char* v) {
    const char* s = env(v);
    return s && *s;
  };
  if (rendezvous_through_pmix(given, env)) {
    const bool make_token =
        given.token.empty() && !set("MERAK_JOB_TOKEN") && !set("MERAK_JOB_TOKEN_FILE");
    const pmix_rendezvous_result r = pmix_rendezvous(make_token, given.timeout);
    given.addr = r.host;
    given.found_by = "the launcher's PMIx server";
    if (given.port < 0 && !set("MASTER_PORT")) given.port = r.port;
    if (make_token) given.token = r.token;
    // A host whose name maps to a loopback address on itself (Debian's
    // 127.0.1.1 line in /etc/hosts) is reached by the others through
    // another address: rank 0 then listens on every interface.
    if (r.rank == 0 && given.bind_addr.empty() && !set("MERAK_BIND_ADDR") &&
        (ntohl(resolve_ipv4(r.host, 0, "rank 0's host").sin_addr.s_addr) >> 24) == 127)
      given.bind_addr = "0.0.0.0";
  }
  return resolve_bootstrap(std::move(given), env);
}

std::unique_ptr<bootstrap> connect_bootstrap(const bootstrap_options& options) {
  if (options.rank < 0 || options.world_size < 1 || options.rank >= options.world_size)
    fail("bootstrap: options not resolved (rank {}, world size {})", options.rank,
         options.world_size);
  return std::make_unique<tcp_bootstrap>(options);
}

}  // namespace merak::job
