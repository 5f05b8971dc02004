#include "job/pmix_rendezvous.hpp"

#include "job/auth.hpp"
#include "job/socket_io.hpp"
#include "core/error.hpp"

#if MERAK_HAVE_PMIX_HEADER
#include <dlfcn.h>
#include <pmix.h>

#include <cstdlib>
#include <cstring>
#endif

namespace merak::job {

#if MERAK_HAVE_PMIX_HEADER

namespace {

constexpr const char* kport_key = "merak.rendezvous.port";
constexpr const char* ktoken_key = "merak.rendezvous.token";

// The few PMIx client calls the rendezvous needs, resolved from libpmix at
// run time. The library stays loaded for the life of the process (PMIx's
// own threads may outlive PMIx_Finalize).
struct pmix_api {
  decltype(&PMIx_Init) init = nullptr;
  decltype(&PMIx_Finalize) finalize = nullptr;
  decltype(&PMIx_Get) get = nullptr;
  decltype(&PMIx_Put) put = nullptr;
  decltype(&PMIx_Commit) commit = nullptr;
  decltype(&PMIx_Fence) fence = nullptr;
  decltype(&PMIx_Error_string) error_string = nullptr;
  decltype(&PMIx_Value_destruct) value_destruct = nullptr;

  static const pmix_api& load() {
    static const pmix_api api = [] {
      void* lib = nullptr;
      for (const char* name : {"libpmix.so.2", "libpmix.so"})
        if ((lib = ::dlopen(name, RTLD_NOW | RTLD_LOCAL))) break;
      if (!lib)
        fail(
            "bootstrap: this process was started by a PMIx server (PMIX_NAMESPACE is set) but "
            "libpmix cannot be loaded: {} (install libpmix2, or set MASTER_ADDR and MASTER_PORT)",
            ::dlerror());
      pmix_api a;
      auto bind = [&](auto& fn, const char* symbol) {
        fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(::dlsym(lib, symbol));
        if (!fn) fail("bootstrap: libpmix has no {}: {}", symbol, ::dlerror());
      };
      bind(a.init, "PMIx_Init");
      bind(a.finalize, "PMIx_Finalize");
      bind(a.get, "PMIx_Get");
      bind(a.put, "PMIx_Put");
      bind(a.commit, "PMIx_Commit");
      bind(a.fence, "PMIx_Fence");
      bind(a.error_string, "PMIx_Error_string");
      bind(a.value_destruct, "PMIx_Value_destruct");
      return a;
    }();
    return api;
  }
};

// A PMIx client session: initialised on construction, finalised on
// destruction (also when a step throws).
class pmix_session {
 public:
  explicit pmix_session(const pmix_api& api) : api_(api) {
    check(api_.init(&me_, nullptr, 0), "PMIx_Init (connecting to the launcher's PMIx server)");
  }
  ~pmix_session() { api_.finalize(nullptr, 0); }
  pmix_session(const pmix_session&) = delete;
  pmix_session& operator=(const pmix_session&) = delete;

  int rank() const { return int(me_.rank); }

  // A value `rank` put (or the server holds) under `key`; `type` is what it
  // must be.
  std::string get_string(int rank, const char* key) {
    pmix_value_t* v = get(rank, key, PMIX_STRING);
    std::string s = v->data.string ? v->data.string : "";
    release(v);
    return s;
  }
  int get_int(int rank, const char* key) {
    pmix_value_t* v = get(rank, key, PMIX_INT);
    const int x = v->data.integer;
    release(v);
    return x;
  }

  void put_string(const char* key, const std::string& s) {
    pmix_value_t v;
    std::memset(&v, 0, sizeof v);
    v.type = PMIX_STRING;
    v.data.string = const_cast<char*>(s.c_str());  // PMIx_Put copies the value
    check(api_.put(PMIX_GLOBAL, key, &v), fmt::format("PMIx_Put({})", key));
  }
  void put_int(const char* key, int x) {
    pmix_value_t v;
    std::memset(&v, 0, sizeof v);
    v.type = PMIX_INT;
    v.data.integer = x;
    check(api_.put(PMIX_GLOBAL, key, &v), fmt::format("PMIx_Put({})", key));
  }

  // Publishes what this rank put and waits for every rank of the job.
  void commit_and_fence(std::chrono::milliseconds timeout) {
    check(api_.commit(), "PMIx_Commit");
    pmix_info_t info[2];
    std::memset(info, 0, sizeof info);
    std::strncpy(info[0].key, PMIX_COLLECT_DATA, PMIX_MAX_KEYLEN);
    info[0].value.type = PMIX_BOOL;
    info[0].value.data.flag = true;
    std::strncpy(info[1].key, PMIX_TIMEOUT, PMIX_MAX_KEYLEN);
    info[1].value.type = PMIX_INT;
    info[1].value.data.integer = int(std::max<int64_t>(1, (timeout.count() + 999) / 1000));
    check(api_.fence(nullptr, 0, info, 2),
          fmt::format("PMIx_Fence (waiting {} s for every rank of the job)",
                      info[1].value.data.integer));
  }

 private:
  pmix_value_t* get(int rank, const char* key, pmix_data_type_t type) {
    pmix_proc_t p;
    std::memset(&p, 0, sizeof p);
    std::strncpy(p.nspace, me_.nspace, PMIX_MAX_NSLEN);
    p.rank = pmix_rank_t(rank);
    pmix_value_t* v = nullptr;
    check(api_.get(&p, key, nullptr, 0, &v), fmt::format("PMIx_Get({} of rank {})", key, rank));
    if (!v || v->type != type) {
      if (v) release(v);
      fail("bootstrap: PMIx_Get({} of rank {}): the value has type {}, not {}", key, rank,
           v ? int(v->type) : -1, int(type));
    }
    return v;
  }
  void release(pmix_value_t* v) {
    api_.value_destruct(v);
    std::free(v);
  }
  void check(pmix_status_t rc, const std::string& what) {
    if (rc != PMIX_SUCCESS)
      fail("bootstrap: {} failed: {} (set MASTER_ADDR and MASTER_PORT to rendezvous without it)",
           what, api_.error_string(rc));
  }

  const pmix_api& api_;
  pmix_proc_t me_{};
};

}  // namespace

bool pmix_rendezvous_built() {
  return true;
}

pmix_rendezvous_result pmix_rendezvous(bool make_token, std::chrono::milliseconds timeout) {
  pmix_session s(pmix_api::load());
  pmix_rendezvous_result r;
  r.rank = s.rank();
  if (r.rank == 0) {
    // Free on every interface, so on whichever one the others reach.
    s.put_int(kport_key, pick_free_port("0.0.0.0"));
    if (make_token) s.put_string(ktoken_key, random_token());
  }
  s.commit_and_fence(timeout);
  r.host = s.get_string(0, PMIX_HOSTNAME);
  r.port = s.get_int(0, kport_key);
  if (make_token) r.token = s.get_string(0, ktoken_key);
  if (r.host.empty()) fail("bootstrap: the PMIx server names no host for rank 0");
  if (r.port < 1 || r.port > 65535) fail("bootstrap: rank 0 published port {} over PMIx", r.port);
  return r;
}

#else

bool pmix_rendezvous_built() {
  return false;
}

pmix_rendezvous_result pmix_rendezvous(bool, std::chrono::milliseconds) {
  fail(
      "bootstrap: this merak was built without PMIx (libpmix-dev), so it cannot find rank 0 of a "
      "job over several hosts by itself: run mpirun -x MASTER_ADDR=HOST (the host of rank 0) -x "
      "MASTER_PORT=PORT -x MERAK_JOB_TOKEN=TOKEN");
}

#endif

}  // namespace merak::job
