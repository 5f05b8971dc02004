#include "comm/nccl_transport.hpp"
#include "comm/nccl_end.hpp"

#include <nccl.h>

#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "core/error.hpp"

namespace merak::comm {
namespace {

using clock_type = std::chrono::steady_clock;
using namespace std::chrono_literals;

constexpr auto kspin = 200us;          // busy polls before sleeping
constexpr auto kpoll_sleep = 50us;     // sleep between polls after the spin
constexpr auto kwatch_period = 50ms;   // bootstrap liveness checks
constexpr auto kabort_bound = 5000ms;  // ncclCommAbort / finalize bound

std::string cuda_text(cudaError_t e) {
  return fmt::format("{} ({})", cudaGetErrorString(e), static_cast<int>(e));
}

int local_rank_from_env(int rank) {
  for (const char* var : {"LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID"}) {
    const char* s = std::getenv(var);
    if (!s || !*s) continue;
    char* end = nullptr;
    const long v = std::strtol(s, &end, 10);
    if (*end != '\0' || v < 0) fail("nccl rank {}: {}='{}' is not a local rank", rank, var, s);
    return static_cast<int>(v);
  }
  return rank;
}

// RAII owners of the CUDA handles.
struct stream_owner {
  cudaStream_t s = nullptr;
  ~stream_owner() {
    if (s) cudaStreamDestroy(s);
  }
};
class cuda_event {
 public:
  explicit cuda_event(int rank) {
    const auto e = cudaEventCreateWithFlags(&ev_, cudaEventDisableTiming);
    if (e != cudaSuccess) fail("nccl rank {}: cudaEventCreate failed: {}", rank, cuda_text(e));
  }
  ~cuda_event() {
    if (ev_) cudaEventDestroy(ev_);
  }
  cuda_event(const cuda_event&) = delete;
  cuda_event& operator=(const cuda_event&) = delete;
  cudaEvent_t get() const { return ev_; }

 private:
  cudaEvent_t ev_ = nullptr;
};

// Device scratch that grows (allreduce_or's gather buffer).
class device_scratch {
 public:
  ~device_scratch() {
    if (p_) cudaFree(p_);
  }
  void* get(size_t bytes, int rank) {
    if (bytes <= cap_) return p_;
    if (p_) cudaFree(p_);
    p_ = nullptr, cap_ = 0;
    const auto e = cudaMalloc(&p_, bytes);
    if (e != cudaSuccess)
      fail("nccl rank {}: cudaMalloc of {} bytes of scratch failed: {}", rank, bytes, cuda_text(e));
    cap_ = bytes;
    return p_;
  }

 private:
  void* p_ = nullptr;
  size_t cap_ = 0;
};

class nccl_transport_impl;

// One launched group of point-to-point operations: done when its event is.
struct p2p_batch {
  explicit p2p_batch(int rank) : done(rank) {}
  cuda_event done;
  bool launched = false;
};

struct pending_op {
  bool send = false;
  int peer = 0;
  tag_t tag = 0;
  void* buf = nullptr;
  size_t bytes = 0;
  std::shared_ptr<p2p_batch> batch;
};

class nccl_op final : public operation {
 public:
  nccl_op(nccl_transport_impl* t, std::shared_ptr<p2p_batch> b, bool send, int peer, tag_t tag)
      : t_(t), batch_(std::move(b)), send_(send), peer_(peer), tag_(tag) {}
  bool test() override;
  void wait(clock_type::time_point deadline) override;

 private:
  nccl_transport_impl* t_;
  std::shared_ptr<p2p_batch> batch_;
  bool send_;
  int peer_;
  tag_t tag_;
  bool done_ = false;
};

class nccl_transport_impl final : public nccl_transport {
 public:
  nccl_transport_impl(std::shared_ptr<control_plane> b, const nccl_options& options)
      : watch_(std::move(b)), rank_(watch_->rank()), size_(watch_->size()) {
    timeout_ = options.timeout;
    int count = 0;  // left untouched by cudaGetDeviceCount without a driver
    const auto ce = cudaGetDeviceCount(&count);
    if (ce != cudaSuccess || count == 0)
      fail("nccl rank {}: no usable CUDA device ({})", rank_,
           ce != cudaSuccess ? cuda_text(ce) : std::string("no CUDA device"));
    device_ = options.device >= 0 ? options.device : local_rank_from_env(rank_);
    if (device_ >= count)
      fail(
          "nccl rank {}: needs GPU {} but this process sees {} (NCCL needs one GPU per rank; set "
          "nccl_options::device or LOCAL_RANK)",
          rank_, device_, count);
    cuda_call(cudaSetDevice(device_), "cudaSetDevice");
    cuda_call(cudaStreamCreateWithFlags(&stream_.s, cudaStreamNonBlocking), "cudaStreamCreate");
    coll_done_ = std::make_unique<cuda_event>(rank_);

    // The unique id travels from rank 0 over the bootstrap.
    ncclUniqueId id{};
    std::string mine;
    if (rank_ == 0) {
      nccl_call(ncclGetUniqueId(&id), "ncclGetUniqueId", "set-up");
      mine.assign(reinterpret_cast<const char*>(&id), sizeof id);
    }
    const auto all = watch_->allgather(mine);
    if (all.at(0).size() != sizeof id)
      fail("nccl rank {}: rank 0 sent a unique id of {} bytes, expected {}", rank_,
           all.at(0).size(), sizeof id);
    std::memcpy(&id, all[0].data(), sizeof id);

    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;  // every NCCL call returns at once; settle() bounds the wait
    const auto rc = ncclCommInitRankConfig(&comm_, size_, id, rank_, &config);
    if (rc != ncclSuccess && rc != ncclInProgress) {
      const std::string last = comm_ ? ncclGetLastError(comm_) : ncclGetLastError(nullptr);
      if (comm_) ncclCommAbort(comm_), comm_ = nullptr;
      fail("nccl rank {}: ncclCommInitRankConfig on GPU {} failed: {}{}{}", rank_, device_,
           ncclGetErrorString(rc), last.empty() ? "" : ": ", last,
           rc == ncclInvalidUsage ? " (NCCL needs one GPU per rank)" : "");
    }
    settle(rc, "ncclCommInitRankConfig", "set-up (all ranks must join)", -1);
  }

  ~nccl_transport_impl() override {
    end_nccl_communicator(comm_, broken_ || !pending_.empty(), kabort_bound);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return "nccl"; }
  cudaStream_t stream() const override { return stream_.s; }
  int device() const override { return device_; }

  completion isend(int peer, tag_t tag, const void* buf, size_t bytes) override {
    return post(true, peer, tag, const_cast<void*>(buf), bytes);
  }
  completion irecv(int peer, tag_t tag, void* buf, size_t bytes) override {
    return post(false, peer, tag, buf, bytes);
  }

  void allreduce_sum(float* data, size_t count) override { reduce(data, count, ncclSum, "sum"); }
  void allreduce_avg(float* data, size_t count) override { reduce(data, count, ncclAvg, "avg"); }

  void allreduce_or(uint64_t* data, size_t count) override {
    usable("allreduce_or");
    if (count == 0) return;
    device_buffer(data, "allreduce_or", -1, 0);
    const size_t bytes = count * sizeof(uint64_t);
    auto* all = static_cast<uint64_t*>(scratch_.get(bytes * size_, rank_));
    collective("ncclAllGather (allreduce_or)",
               [&] { return ncclAllGather(data, all, bytes, ncclUint8, comm_, stream_.s); });
    collective_bytes_ += double(size_ - 1) * double(bytes);
    // OR on the host: bitmaps are n/8 bytes, small next to the tensors.
    std::vector<uint64_t> host(count * size_);
    cuda_call(cudaMemcpyAsync(host.data(), all, bytes * size_, cudaMemcpyDeviceToHost, stream_.s),
              "cudaMemcpyAsync");
    wait_stream("allreduce_or copy", -1);
    for (int r = 1; r < size_; ++r)
      for (size_t i = 0; i < count; ++i) host[i] |= host[r * count + i];
    cuda_call(cudaMemcpyAsync(data, host.data(), bytes, cudaMemcpyHostToDevice, stream_.s),
              "cudaMemcpyAsync");
    wait_stream("allreduce_or copy", -1);
  }

  void reduce_scatter_sum(const float* all, float* mine, size_t count) override {
    scatter(all, mine, count, ncclFloat32, sizeof(float), "ncclReduceScatter (float)");
  }
  void reduce_scatter_sum_bf16(const uint16_t* all, uint16_t* mine, size_t count) override {
    scatter(all, mine, count, ncclBfloat16, sizeof(uint16_t), "ncclReduceScatter (bf16)");
  }

  void allgather(const void* mine, size_t bytes, void* all) override {
    usable("allgather");
    if (bytes == 0) return;
    device_buffer(mine, "allgather", -1, 0);
    device_buffer(all, "allgather", -1, 0);
    collective("ncclAllGather",
               [&] { return ncclAllGather(mine, all, bytes, ncclUint8, comm_, stream_.s); });
    collective_bytes_ += double(size_ - 1) * double(bytes);
  }

  void broadcast(void* data, size_t bytes, int root) override {
    usable("broadcast");
    if (root < 0 || root >= size_)
      fail("nccl rank {}: broadcast root {} is not a rank of 0..{}", rank_, root, size_ - 1);
    if (bytes == 0) return;
    device_buffer(data, "broadcast", -1, 0);
    collective("ncclBroadcast",
               [&] { return ncclBroadcast(data, data, bytes, ncclUint8, root, comm_, stream_.s); });
    collective_bytes_ += double(bytes);
  }

  void barrier() override {
    usable("barrier");
    float* one = static_cast<float*>(scratch_.get(sizeof(float), rank_));
    collective("ncclAllReduce (barrier)",
               [&] { return ncclAllReduce(one, one, 1, ncclFloat32, ncclSum, comm_, stream_.s); });
  }

  // Launches every posted operation as one group (no-op when none).
  void flush() {
    if (pending_.empty()) return;
    usable("send/recv");
    auto batch = pending_.front().batch;
    auto group = [&] {
      auto rc = ncclGroupStart();
      if (rc != ncclSuccess) return rc;
      for (const auto& p : pending_) {
        rc = p.send ? ncclSend(p.buf, p.bytes, ncclUint8, p.peer, comm_, stream_.s)
                    : ncclRecv(p.buf, p.bytes, ncclUint8, p.peer, comm_, stream_.s);
        if (rc != ncclSuccess && rc != ncclInProgress) {
          ncclGroupEnd();
          return rc;
        }
      }
      return ncclGroupEnd();
    };
    const auto& first = pending_.front();
    const std::string what =
        fmt::format("{} operations (first: {} peer {} tag {})", pending_.size(),
                    first.send ? "send to" : "receive from", first.peer, first.tag);
    const int peer = first.peer;
    const ncclResult_t launched = group();  // reads pending_: clear it only after
    pending_.clear();
    settle(launched, "ncclSend/ncclRecv group", what, peer);
    cuda_call(cudaEventRecord(batch->done.get(), stream_.s), "cudaEventRecord");
    batch->launched = true;
    open_batch_.reset();
  }

  // One poll of a launched batch: true when done; throws on an NCCL error.
  bool poll(p2p_batch& b, const char* what, int peer, tag_t tag) {
    usable(what);
    const auto e = cudaEventQuery(b.done.get());
    if (e == cudaSuccess) return true;
    if (e != cudaErrorNotReady)
      fail("nccl rank {}: {} peer {} tag {}: CUDA error {}", rank_, what, peer, tag, cuda_text(e));
    ncclResult_t async = ncclSuccess;
    ncclCommGetAsyncError(comm_, &async);
    if (async != ncclSuccess && async != ncclInProgress)
      abort_with("{} peer {} tag {}: NCCL error {}: {}", what, peer, tag, ncclGetErrorString(async),
                 ncclGetLastError(comm_));
    return false;
  }

  // Waits for a batch until `deadline`; aborts the communicator on timeout.
  void wait_batch(p2p_batch& b, clock_type::time_point deadline, const char* what, int peer,
                  tag_t tag) {
    if (!b.launched) flush();
    bounded([&] { return poll(b, what, peer, tag); }, deadline,
            [&] { return fmt::format("{} peer {} tag {}", what, peer, tag); }, peer);
  }

 private:
  friend class nccl_op;

  // Every entry point: refuse after an abort; make this rank's GPU current
  // (the CUDA device is per thread, and a comm_stream's thread is not ours).
  void usable(const char* what) const {
    if (broken_)
      fail("nccl rank {}: {}: the communicator was aborted after an earlier error", rank_, what);
    int cur = -1;
    if (cudaGetDevice(&cur) != cudaSuccess || cur != device_)
      cuda_call(cudaSetDevice(device_), "cudaSetDevice");
  }

  void cuda_call(cudaError_t e, const char* call) const {
    if (e != cudaSuccess) fail("nccl rank {}: {} failed: {}", rank_, call, cuda_text(e));
  }

  void nccl_call(ncclResult_t rc, const char* call, const std::string& what) const {
    if (rc != ncclSuccess)
      fail("nccl rank {}: {} ({}) failed: {}", rank_, call, what, ncclGetErrorString(rc));
  }

  void device_buffer(const void* p, const char* what, int peer, tag_t tag) const {
    cudaPointerAttributes a{};
    if (p == nullptr || cudaPointerGetAttributes(&a, p) != cudaSuccess ||
        (a.type != cudaMemoryTypeDevice && a.type != cudaMemoryTypeManaged)) {
      cudaGetLastError();  // clear the sticky-free error of a host pointer
      if (peer >= 0)
        fail("nccl rank {}: {} peer {} tag {}: the buffer is not device memory", rank_, what, peer,
             tag);
      fail("nccl rank {}: {}: the buffer is not device memory", rank_, what);
    }
  }

  completion post(bool send, int peer, tag_t tag, void* buf, size_t bytes) {
    const char* what = send ? "send to" : "receive from";
    usable(what);
    if (peer < 0 || peer >= size_)
      fail("nccl rank {}: {} peer {}: not a rank of 0..{}", rank_, what, peer, size_ - 1);
    if (bytes == 0) return {};
    device_buffer(buf, what, peer, tag);
    if (!open_batch_) open_batch_ = std::make_shared<p2p_batch>(rank_);
    pending_.push_back({send, peer, tag, buf, bytes, open_batch_});
    if (send && peer != rank_) count_sent(bytes);
    return completion(std::make_shared<nccl_op>(this, open_batch_, send, peer, tag), timeout_);
  }

  template <typename Fn>
  void collective(const char* call, Fn&& fn) {
    flush();  // posted point-to-point operations go first, in order
    settle(fn(), call, call, -1);
    wait_stream(call, -1);
  }

  void reduce(float* data, size_t count, ncclRedOp_t op, const char* name) {
    usable("allreduce");
    if (count == 0) return;
    device_buffer(data, "allreduce", -1, 0);
    collective(name[0] == 's' ? "ncclAllReduce (sum)" : "ncclAllReduce (avg)",
               [&] { return ncclAllReduce(data, data, count, ncclFloat32, op, comm_, stream_.s); });
    collective_bytes_ += 2.0 * (size_ - 1) / size_ * double(count) * sizeof(float);
  }

  void scatter(const void* all, void* mine, size_t count, ncclDataType_t type, size_t elem,
               const char* call) {
    usable("reduce_scatter");
    if (count == 0) return;
    device_buffer(all, "reduce_scatter", -1, 0);
    device_buffer(mine, "reduce_scatter", -1, 0);
    collective(call, [&] {
      return ncclReduceScatter(all, mine, count, type, ncclSum, comm_, stream_.s);
    });
    collective_bytes_ += double(size_ - 1) * double(count) * double(elem);
  }

  // Waits until the stream's work so far is done.
  void wait_stream(const char* what, int peer) {
    cuda_call(cudaEventRecord(coll_done_->get(), stream_.s), "cudaEventRecord");
    bounded(
        [&] {
          const auto e = cudaEventQuery(coll_done_->get());
          if (e == cudaSuccess) return true;
          if (e != cudaErrorNotReady)
            fail("nccl rank {}: {}: CUDA error {}", rank_, what, cuda_text(e));
          ncclResult_t async = ncclSuccess;
          ncclCommGetAsyncError(comm_, &async);
          if (async != ncclSuccess && async != ncclInProgress)
            abort_with("{}: NCCL error {}: {}", what, ncclGetErrorString(async),
                       ncclGetLastError(comm_));
          return false;
        },
        clock_type::now() + timeout_, [&] { return std::string(what); }, peer);
  }

  // A non-blocking NCCL call returned `rc`: wait until the communicator
  // leaves ncclInProgress (bounded), throw on an error.
  void settle(ncclResult_t rc, const char* call, const std::string& what, int peer) {
    if (rc != ncclSuccess && rc != ncclInProgress)
      abort_with("{} ({}) failed: {}: {}", call, what, ncclGetErrorString(rc),
                 comm_ ? ncclGetLastError(comm_) : "");
    if (rc == ncclSuccess) return;
    bounded(
        [&] {
          ncclResult_t st = ncclSuccess;
          ncclCommGetAsyncError(comm_, &st);
          if (st == ncclInProgress) return false;
          if (st != ncclSuccess)
            abort_with("{} ({}) failed: {}: {}{}", call, what, ncclGetErrorString(st),
                       ncclGetLastError(comm_),
                       st == ncclInvalidUsage ? " (NCCL needs one GPU per rank)" : "");
          return true;
        },
        clock_type::now() + timeout_, [&] { return fmt::format("{} ({})", call, what); }, peer);
  }

  // Polls `done` until it returns true or `deadline`; checks the bootstrap's
  // liveness watch every kwatch_period. On timeout or a dead peer: abort.
  template <typename Done, typename What>
  void bounded(Done&& done, clock_type::time_point deadline, What&& what, int peer) {
    const auto start = clock_type::now();
    auto next_watch = start + kwatch_period;
    while (!done()) {
      const auto now = clock_type::now();
      if (now >= next_watch) {
        next_watch = now + kwatch_period;
        if (const int dead = watch_->dead_peer(); dead >= 0)
          abort_with("{}: peer {} went away (its process ended)", what(), dead);
      }
      if (now >= deadline) {
        const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now - start).count();
        if (peer >= 0) abort_with("{}: timed out after {} ms waiting on peer {}", what(), ms, peer);
        abort_with("{}: timed out after {} ms waiting on the other ranks of 0..{}", what(), ms,
                   size_ - 1);
      }
      if (now - start > kspin) std::this_thread::sleep_for(kpoll_sleep);
    }
  }

  template <typename... Args>
  [[noreturn]] void abort_with(fmt::format_string<Args...> f, Args&&... args) {
    std::string msg = fmt::format(f, std::forward<Args>(args)...);
    if (comm_ && !broken_) {
      broken_ = true;
      ncclCommAbort(comm_);  // non-blocking communicator: returns promptly
      comm_ = nullptr;
    }
    pending_.clear();
    open_batch_.reset();
    fail("nccl rank {}: {}", rank_, msg);
  }

  std::shared_ptr<control_plane> watch_;
  int rank_, size_;
  int device_ = 0;
  stream_owner stream_;
  std::unique_ptr<cuda_event> coll_done_;
  ncclComm_t comm_ = nullptr;
  bool broken_ = false;
  std::vector<pending_op> pending_;
  std::shared_ptr<p2p_batch> open_batch_;
  device_scratch scratch_;
};

bool nccl_op::test() {
  if (done_) return true;
  if (!batch_->launched) t_->flush();
  done_ = t_->poll(*batch_, send_ ? "send to" : "receive from", peer_, tag_);
  return done_;
}

void nccl_op::wait(clock_type::time_point deadline) {
  if (done_) return;
  t_->wait_batch(*batch_, deadline, send_ ? "send to" : "receive from", peer_, tag_);
  done_ = true;
}

}  // namespace

std::unique_ptr<nccl_transport> make_nccl_transport(std::shared_ptr<control_plane> b,
                                                    const nccl_options& options) {
  if (!b) fail("make_nccl_transport: no bootstrap");
  return std::make_unique<nccl_transport_impl>(std::move(b), options);
}

int nccl_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
  return n;
}

std::string nccl_unavailable_reason() {
  int n = 0;
  const auto e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) return cuda_text(e);
  return n > 0 ? "" : "no CUDA device";
}

std::string nccl_version() {
  int v = 0;
  if (ncclGetVersion(&v) != ncclSuccess) return "unknown";
  // NCCL >= 2.9 encodes major*10000 + minor*100 + patch.
  return fmt::format("{}.{}.{}", v / 10000, (v / 100) % 100, v % 100);
}

}  // namespace merak::comm
