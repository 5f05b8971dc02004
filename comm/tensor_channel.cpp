#include "comm/tensor_channel.hpp"

#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <deque>
#include <list>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "comm/control_plane.hpp"
#include "core/error.hpp"
#include "core/shared_memory.hpp"

namespace merak::comm {
namespace {

constexpr uint32_t kmagic = 0x4d4b5443;  // "MKTC"
constexpr tag_t kheader_tag = 0;
constexpr int kmax_dims = 6;
// Payload tags run from 1; the UCX transport carries 44 bits of tag.
constexpr uint64_t ktag_space = (uint64_t{1} << 43) - 1;

constexpr uint32_t kin_ring = 1;    // flags: the tensor lies in the pair's ring at ring_pos
constexpr uint32_t kon_device = 2;  // flags: the payload moves over the pair's device link

struct wire_header {
  uint32_t magic;
  int32_t dst, kind, mb, value;
  int32_t dtype;
  int32_t ndim;
  uint32_t flags;
  uint64_t seq;
  int64_t dims[kmax_dims];
  uint64_t ring_pos;
};
static_assert(sizeof(wire_header) == 96);

tag_t payload_tag(uint64_t seq) {
  return 1 + (seq - 1) % ktag_space;
}

}  // namespace

struct tensor_channel::impl {
  std::shared_ptr<transport> t;
  deliver_fn deliver;
  fail_fn failed;
  std::chrono::microseconds spin{0};
  channel_rings rings;  // the `to` side under mu, the `from` side the thread's
  channel_links links;  // fixed at construction; a link's calls under mu
  int wake_fd = -1;
  std::atomic<bool> stop{false};
  std::thread thread;

  // The transport and everything in flight (below) belong to whoever holds
  // `mu`: the channel's thread while it is awake, or a sender that posts
  // its tensor itself while that thread sleeps. Senders only try the lock
  // and never wait for it.
  std::mutex mu;
  // Sends that found `mu` taken, in the order they came (under queue_mu);
  // whoever holds `mu` posts them before anything newer.
  struct outgoing {
    int peer;
    tensor_label label;
    std::shared_ptr<const model::tensor> x;
  };
  std::mutex queue_mu;
  std::deque<outgoing> queue;
  std::string send_error;  // under mu: a sender's failed post, for the thread to report

  // Under mu.
  struct send_op {
    wire_header header;
    std::shared_ptr<const model::tensor> x;
    completion head, body;
    std::unique_ptr<device_transfer> moved;  // the payload over a device link
  };
  struct header_slot {
    wire_header header;
    completion c;
  };
  struct payload_op {
    int peer;
    tensor_label label;
    model::tensor x;
    completion c;
    std::unique_ptr<device_transfer> moved;  // the payload over a device link
  };
  std::list<send_op> sends;
  std::vector<std::unique_ptr<header_slot>> headers;  // by peer
  std::list<payload_op> payloads;
  std::vector<uint64_t> sent_seq, recv_seq;  // by peer

  void post_header(int peer) {
    auto& h = headers[size_t(peer)];
    h->c = t->irecv(peer, kheader_tag, &h->header, sizeof h->header);
  }

  void start_send(outgoing&& message) {
    const auto& x = *message.x;
    if (int(x.shape().size()) > kmax_dims)
      fail("tensor channel: a tensor of {} dimensions (at most {})", x.shape().size(), kmax_dims);
    sends.emplace_back();
    send_op& s = sends.back();
    s.header = {};
    s.header.magic = kmagic;
    s.header.dst = message.label.dst;
    s.header.kind = message.label.kind;
    s.header.mb = message.label.mb;
    s.header.value = message.label.value;
    s.header.dtype = int32_t(x.type());
    s.header.ndim = int32_t(x.shape().size());
    s.header.seq = ++sent_seq[size_t(message.peer)];
    for (size_t d = 0; d < x.shape().size(); ++d) s.header.dims[d] = x.shape()[d];
    if (x.where().type != model::device::kind::cpu) {  // send() left it here for a link
      auto& link = *links.at(message.peer);
      s.header.flags = kon_device;
      s.x = std::move(message.x);
      s.head = t->isend(message.peer, kheader_tag, &s.header, sizeof s.header);
      s.moved = link.send(*s.x);
      return;
    }
    if (auto r = rings.to.find(message.peer);
        r != rings.to.end() && x.bytes() > 0) {
      if (auto pos = r->second->reserve(x.bytes())) {
        std::memcpy(r->second->at(*pos), x.raw(), x.bytes());
        std::atomic_thread_fence(std::memory_order_release);  // the bytes before the header
        s.header.flags = kin_ring;
        s.header.ring_pos = *pos;
        s.head = t->isend(message.peer, kheader_tag, &s.header, sizeof s.header);
        return;
      }
    }
    s.x = std::move(message.x);
    s.head = t->isend(message.peer, kheader_tag, &s.header, sizeof s.header);
    s.body = t->isend(message.peer, payload_tag(s.header.seq), s.x->raw(), s.x->bytes());
  }

  // Posts the queued sends (holding mu); returns whether there were any.
  bool post_queued() {
    std::deque<outgoing> mine;
    {
      std::lock_guard lock(queue_mu);
      mine.swap(queue);
    }
    for (auto& o : mine) start_send(std::move(o));
    return !mine.empty();
  }

  // A header arrived from `peer`: post its payload's receive, and the next
  // header's.
  void header_arrived(int peer) {
    auto& h = headers[size_t(peer)];
    h->c.wait();  // done: throws on a failed receive
    const wire_header hd = h->header;
    const uint64_t expect = ++recv_seq[size_t(peer)];
    if (hd.magic != kmagic || hd.seq != expect || hd.ndim < 0 || hd.ndim > kmax_dims ||
        hd.dtype < 0 || hd.dtype >= int32_t(model::kdtype_count) ||
        (hd.flags & ~(kin_ring | kon_device)) != 0 || hd.flags == (kin_ring | kon_device))
      fail("tensor channel rank {}: a malformed header from peer {} (message {}, expected {})",
           t->rank(), peer, hd.seq, expect);
    model::shape_t shape(hd.dims, hd.dims + hd.ndim);
    for (int64_t d : shape)
      if (d < 0 || d > (int64_t{1} << 40))
        fail("tensor channel rank {}: peer {} announced shape {}", t->rank(), peer,
             model::shape_str(shape));
    payloads.push_back({peer, {hd.dst, hd.kind, hd.mb, hd.value}, {}, {}, {}});
    auto& p = payloads.back();
    if (hd.flags & kon_device) {
      auto link = links.find(peer);
      if (link == links.end())
        fail(
            "tensor channel rank {}: peer {} sent message {} over a device link this process "
            "does not have with it",
            t->rank(), peer, hd.seq);
      p.moved = link->second->recv(shape, model::dtype(hd.dtype), p.x);
      post_header(peer);
      return;
    }
    p.x = model::tensor(shape, model::dtype(hd.dtype));
    if (hd.flags & kin_ring) {  // here already: copy it out (done, delivered on this pass)
      auto r = rings.from.find(peer);
      if (r == rings.from.end())
        fail(
            "tensor channel rank {}: peer {} sent message {} through a shared ring it does not "
            "share with this process",
            t->rank(), peer, hd.seq);
      if (!r->second->holds(hd.ring_pos, p.x.bytes()))
        fail(
            "tensor channel rank {}: peer {} placed message {} ({} bytes) at {}, outside the "
            "ring of {} bytes",
            t->rank(), peer, hd.seq, p.x.bytes(), hd.ring_pos, r->second->capacity());
      std::atomic_thread_fence(std::memory_order_acquire);
      std::memcpy(p.x.raw(), r->second->at(hd.ring_pos), p.x.bytes());
      r->second->release(hd.ring_pos, p.x.bytes());
    } else {
      p.c = t->irecv(peer, payload_tag(hd.seq), p.x.raw(), p.x.bytes());
    }
    post_header(peer);
  }

  // One pass over everything in flight; returns whether anything finished.
  bool poll_once() {
    bool any = false;
    for (int peer = 0; peer < t->size(); ++peer)
      if (headers[size_t(peer)] && headers[size_t(peer)]->c.test()) {
        header_arrived(peer);
        any = true;
      }
    for (auto it = payloads.begin(); it != payloads.end();) {
      if (!it->c.test() || (it->moved && !it->moved->test())) {
        ++it;
        continue;
      }
      it->c.wait();
      deliver(it->peer, it->label, std::move(it->x));
      it = payloads.erase(it);
      any = true;
    }
    for (auto it = sends.begin(); it != sends.end();) {
      if (!it->head.test() || !it->body.test() || (it->moved && !it->moved->test())) {
        ++it;
        continue;
      }
      it->head.wait();
      it->body.wait();
      it = sends.erase(it);
      any = true;
    }
    return any;
  }

  void run() {
    ::pthread_setname_np(::pthread_self(), "merak.channel");  // for top, perf and gdb
    std::unique_lock lock(mu);
    try {
      for (int peer = 0; peer < t->size(); ++peer)
        if (peer != t->rank()) {
          headers[size_t(peer)] = std::make_unique<header_slot>();
          post_header(peer);
        }
      // After any traffic the thread polls for `spin` before it sleeps: the
      // next tensor of a step is usually due soon, and a sleeping thread
      // is slow to wake, the more so on a loaded machine.
      auto last_progress = std::chrono::steady_clock::now();
      while (!stop.load(std::memory_order_acquire)) {
        uint64_t drained;
        if (::read(wake_fd, &drained, sizeof drained) < 0) {
        }  // non-blocking: just clears the wake-up
        if (!send_error.empty()) fail("{}", send_error);
        const bool posted = post_queued();
        const bool moved = poll_once() || posted;
        const auto now = std::chrono::steady_clock::now();
        // With a transfer in flight it keeps polling for ten times `spin`
        // after the last progress; then (or at once, without a spin budget)
        // it sleeps until the transport signals or a sender wakes it, waking
        // every millisecond while a transfer is unfinished.
        if (moved) {  // more may be ready: sleep only after a pass that found nothing
          last_progress = now;
          continue;
        }
        const bool in_flight = !sends.empty() || !payloads.empty();
        if (now < last_progress + (in_flight ? 10 * spin : spin)) continue;
        const int efd = t->arm_event_fd();
        if (efd == transport::kprogress) continue;
        // A sender that posts after this point finds the thread asleep and
        // wakes it unless its send finished as it was posted.
        const int wait_ms = !sends.empty() || !payloads.empty() ? 1 : 100;
        lock.unlock();
        pollfd p[2] = {{wake_fd, POLLIN, 0}, {efd, POLLIN, 0}};
        ::poll(p, efd >= 0 ? 2 : 1, wait_ms);
        lock.lock();
      }
    } catch (const std::exception& e) {
      failed(e.what());
    }
    // Withdraw what is in flight (its buffers die with it).
    payloads.clear();
    headers.clear();
    sends.clear();
    stop.store(true, std::memory_order_release);  // senders queue from now on
  }

  // Posts `o` from the caller's thread when the channel's thread is not
  // using the transport, else queues it for that thread.
  void send(outgoing&& message) {
    std::unique_lock lock(mu, std::try_to_lock);
    if (!lock.owns_lock() || stop.load(std::memory_order_acquire)) {
      {
        std::lock_guard q(queue_mu);
        queue.push_back(std::move(message));
      }
      wake();
      return;
    }
    try {
      post_queued();  // older sends first
      start_send(std::move(message));
      // A send that did not finish at once (a payload in fragments, a
      // rendezvous) needs the transport's progress, which the channel's
      // thread makes: wake it. A tensor that went through a ring has only
      // its header to send, which leaves as it is posted.
      auto& s = sends.back();
      if (!s.head.test() || !s.body.test() || s.moved) wake();
    } catch (const std::exception& e) {
      send_error = e.what();
      wake();
    }
  }

  void wake() {
    uint64_t one = 1;
    if (::write(wake_fd, &one, sizeof one) < 0) {
    }
  }
};

tensor_channel::tensor_channel(std::shared_ptr<transport> t, deliver_fn deliver, fail_fn failed,
                               std::chrono::microseconds spin, channel_rings rings,
                               channel_links links)
    : impl_(std::make_unique<impl>()) {
  impl_->t = std::move(t);
  impl_->spin = spin;
  for (const auto* side : {&rings.to, &rings.from})
    for (const auto& [peer, ring] : *side)
      MERAK_CHECK(ring && peer >= 0 && peer < impl_->t->size() && peer != impl_->t->rank(),
                  "tensor channel: a ring with rank {} of {}", peer, impl_->t->size());
  impl_->rings = std::move(rings);
  for (const auto& [peer, link] : links)
    MERAK_CHECK(link && peer >= 0 && peer < impl_->t->size() && peer != impl_->t->rank(),
                "tensor channel: a device link with rank {} of {}", peer, impl_->t->size());
  impl_->links = std::move(links);
  impl_->deliver = std::move(deliver);
  impl_->failed = std::move(failed);
  const size_t n = size_t(impl_->t->size());
  impl_->headers.resize(n);
  impl_->sent_seq.assign(n, 0);  // a sender may post before the thread runs
  impl_->recv_seq.assign(n, 0);
  impl_->wake_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (impl_->wake_fd < 0) fail("tensor channel: eventfd: {}", std::strerror(errno));
  impl_->thread = std::thread([p = impl_.get()] { p->run(); });
}

tensor_channel::~tensor_channel() {
  impl_->stop.store(true, std::memory_order_release);
  impl_->wake();
  impl_->thread.join();
  ::close(impl_->wake_fd);
}

void tensor_channel::send(int peer, const tensor_label& label,
                          std::shared_ptr<const model::tensor> x) {
  MERAK_CHECK(peer >= 0 && peer < impl_->t->size() && peer != impl_->t->rank(),
              "tensor channel: send to rank {} of {}", peer, impl_->t->size());
  if (x->where().type != model::device::kind::cpu) {
    // Through the peer's link when it has one for this device, else a host
    // copy (links do not change after construction: read without the lock).
    auto link = impl_->links.find(peer);
    if (link == impl_->links.end() || !(link->second->where() == x->where()))
      x = std::make_shared<const model::tensor>(x->to(model::device::cpu()));
  }
  impl_->send({peer, label, std::move(x)});
}

channel_rings make_host_rings(control_plane& b, const std::vector<int>& peers, size_t capacity,
                              uint64_t job) {
  const int me = b.rank();
  capacity = host_ring::block_bytes(capacity);
  const size_t bytes = host_ring::region_bytes(capacity);
  // The sender's ring carries the sender's identity (process_scoped_name),
  // which its receiver learns through the all-gather.
  const std::string own = process_scoped_name("ring", fmt::format("{:016x}", job));
  const auto prefixes = b.allgather(own);
  auto name = [&](int from, int to) {
    return fmt::format("{}-{}-{}", prefixes[size_t(from)], from, to);
  };
  std::map<int, std::shared_ptr<shared_region>> outgoing, incoming;
  for (int p : peers) try {
      outgoing[p] = std::make_shared<shared_region>(shared_region::create(name(me, p), bytes));
    } catch (const std::exception& e) {
      spdlog::warn("rank {}: no shared ring to rank {} ({}): its tensors go over the transport", me,
                   p, e.what());
    }
  b.barrier();
  std::string mapped;  // the senders whose rings this rank mapped
  for (int p : peers) try {
      incoming[p] = std::make_shared<shared_region>(shared_region::open(name(p, me), bytes));
      mapped += fmt::format(" {} ", p);
    } catch (const std::exception& e) {
      spdlog::debug("rank {}: no shared ring from rank {}: {}", me, p, e.what());
    }
  const auto blobs = b.allgather(mapped);
  channel_rings out;
  const std::string mine = fmt::format(" {} ", me);
  for (auto& [p, region] : outgoing) {
    region->unlink();
    if (blobs[size_t(p)].find(mine) != std::string::npos)
      out.to[p] = std::make_shared<host_ring>(region->data(), capacity, region);
  }
  for (auto& [p, region] : incoming)
    out.from[p] = std::make_shared<host_ring>(region->data(), capacity, region);
  return out;
}

int tensor_channel::rank() const {
  return impl_->t->rank();
}

}  // namespace merak::comm
