#include "comm/inproc.hpp"

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <utility>

#include "core/error.hpp"

namespace merak::comm {
namespace {

using clock_type = std::chrono::steady_clock;

// A posted receive. Its states move posted -> claimed (a sender took it and
// copies outside the lock) -> done, or posted -> withdrawn (timed out).
struct recv_op_state {
  enum class state { posted, claimed, done, withdrawn };
  int self = 0, peer = 0;
  tag_t tag = 0;
  void* buf = nullptr;
  size_t bytes = 0;
  state st = state::posted;
  std::string error;  // non-empty: failed
};

// The receiving side of one rank: messages that arrived before their receive,
// and receives posted before their message, both keyed by (source, tag).
struct mailbox {
  std::mutex mu;
  std::condition_variable cv;
  std::map<std::pair<int, tag_t>, std::deque<std::vector<std::byte>>> unexpected;
  std::map<std::pair<int, tag_t>, std::deque<std::shared_ptr<recv_op_state>>> posted;
  std::atomic<bool> closed{false};  // this rank's endpoint was destroyed
};

struct group_state {
  explicit group_state(int n) : boxes(n) {
    for (auto& b : boxes) b = std::make_unique<mailbox>();
  }
  std::vector<std::unique_ptr<mailbox>> boxes;
};

std::string describe(const recv_op_state& r) {
  return fmt::format("inproc rank {}: receive from peer {} (tag {})", r.self, r.peer, r.tag);
}

class recv_operation final : public operation {
 public:
  recv_operation(std::shared_ptr<group_state> g, std::shared_ptr<recv_op_state> s)
      : group_(std::move(g)), s_(std::move(s)) {}

  // A receive dropped before it finished is withdrawn, so that no sender
  // writes into a buffer its owner may already have freed (after an error in
  // a collective, say).
  ~recv_operation() override {
    mailbox& box = *group_->boxes[s_->self];
    std::unique_lock lock(box.mu);
    if (s_->st == recv_op_state::state::posted) withdraw();
    while (s_->st == recv_op_state::state::claimed) box.cv.wait(lock);
  }

  bool test() override {
    mailbox& box = *group_->boxes[s_->self];
    std::lock_guard lock(box.mu);
    return s_->st == recv_op_state::state::done;
  }

  void wait(clock_type::time_point deadline) override {
    mailbox& box = *group_->boxes[s_->self];
    std::unique_lock lock(box.mu);
    for (;;) {
      if (s_->st == recv_op_state::state::done) break;
      if (s_->st == recv_op_state::state::posted) {
        // A closed peer with no buffered message will never send.
        if (group_->boxes[s_->peer]->closed) {
          withdraw();
          throw error(fmt::format("{}: peer {} closed its endpoint", describe(*s_), s_->peer));
        }
        if (clock_type::now() >= deadline) {
          withdraw();
          throw error(fmt::format("{}: timed out (peer {} sent nothing matching)", describe(*s_),
                                  s_->peer));
        }
      }
      // A claimed receive finishes after one memcpy: wait without deadline
      // checks, the sender owes us a notification.
      box.cv.wait_until(lock,
                        std::min(deadline, clock_type::now() + std::chrono::milliseconds(50)));
    }
    if (!s_->error.empty()) throw error(s_->error);
  }

 private:
  // Caller holds the mailbox lock.
  void withdraw() {
    mailbox& box = *group_->boxes[s_->self];
    auto it = box.posted.find({s_->peer, s_->tag});
    if (it != box.posted.end()) {
      auto& q = it->second;
      for (auto p = q.begin(); p != q.end(); ++p)
        if (*p == s_) {
          q.erase(p);
          break;
        }
      if (q.empty()) box.posted.erase(it);
    }
    s_->st = recv_op_state::state::withdrawn;
  }

  std::shared_ptr<group_state> group_;
  std::shared_ptr<recv_op_state> s_;
};

// A receive that completed (or failed) at once.
class finished_operation final : public operation {
 public:
  explicit finished_operation(std::string err) : error_(std::move(err)) {}
  bool test() override { return true; }
  void wait(clock_type::time_point) override {
    if (!error_.empty()) throw error(error_);
  }

 private:
  std::string error_;
};

std::string size_mismatch(int self, int peer, tag_t tag, size_t sent, size_t expected) {
  return fmt::format(
      "inproc rank {}: receive from peer {} (tag {}): peer sent {} bytes, {} expected", self, peer,
      tag, sent, expected);
}

class inproc_transport final : public transport {
 public:
  inproc_transport(std::shared_ptr<group_state> g, int rank, std::chrono::milliseconds timeout)
      : group_(std::move(g)), rank_(rank) {
    timeout_ = timeout;
  }

  ~inproc_transport() override {
    mailbox& box = *group_->boxes[rank_];
    {
      std::lock_guard lock(box.mu);
      box.closed = true;
    }
    // Peers waiting on us poll `closed` on their own mailbox's condition.
    for (auto& b : group_->boxes) {
      std::lock_guard lock(b->mu);
      b->cv.notify_all();
    }
  }

  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(group_->boxes.size()); }
  std::string name() const override { return "inproc"; }

  completion isend(int peer, tag_t tag, const void* buf, size_t bytes) override {
    check_peer(peer, "send to");
    mailbox& box = *group_->boxes[peer];
    std::shared_ptr<recv_op_state> r;
    {
      std::lock_guard lock(box.mu);
      if (box.closed)
        fail("inproc rank {}: send to peer {} (tag {}): peer closed its endpoint", rank_, peer,
             tag);
      auto it = box.posted.find({rank_, tag});
      if (it != box.posted.end()) {
        r = std::move(it->second.front());
        it->second.pop_front();
        if (it->second.empty()) box.posted.erase(it);
        r->st = recv_op_state::state::claimed;
      } else {
        const auto* p = static_cast<const std::byte*>(buf);
        box.unexpected[{rank_, tag}].emplace_back(p, p + bytes);
      }
    }
    if (r) {
      // Copy outside the lock; the receiver waits for `done`.
      if (r->bytes == bytes) {
        if (bytes) std::memcpy(r->buf, buf, bytes);
      } else {
        r->error = size_mismatch(peer, rank_, tag, bytes, r->bytes);
      }
      std::lock_guard lock(box.mu);
      r->st = recv_op_state::state::done;
      box.cv.notify_all();
    } else {
      std::lock_guard lock(box.mu);
      box.cv.notify_all();
    }
    if (peer != rank_) count_sent(bytes);
    return {};
  }

  completion irecv(int peer, tag_t tag, void* buf, size_t bytes) override {
    check_peer(peer, "receive from");
    mailbox& box = *group_->boxes[rank_];
    std::unique_lock lock(box.mu);
    auto it = box.unexpected.find({peer, tag});
    if (it != box.unexpected.end()) {
      std::vector<std::byte> msg = std::move(it->second.front());
      it->second.pop_front();
      if (it->second.empty()) box.unexpected.erase(it);
      lock.unlock();
      if (msg.size() != bytes)
        return {std::make_shared<finished_operation>(
                    size_mismatch(rank_, peer, tag, msg.size(), bytes)),
                timeout_};
      if (bytes) std::memcpy(buf, msg.data(), bytes);
      return {};
    }
    auto s = std::make_shared<recv_op_state>();
    s->self = rank_;
    s->peer = peer;
    s->tag = tag;
    s->buf = buf;
    s->bytes = bytes;
    box.posted[{peer, tag}].push_back(s);
    return {std::make_shared<recv_operation>(group_, std::move(s)), timeout_};
  }

 private:
  void check_peer(int peer, const char* what) const {
    if (peer < 0 || peer >= size())
      fail("inproc rank {}: {} peer {}: no such rank (group of {})", rank_, what, peer, size());
  }

  std::shared_ptr<group_state> group_;
  int rank_;
};

}  // namespace

std::vector<std::unique_ptr<transport>> make_inproc_group(int size,
                                                          std::chrono::milliseconds timeout) {
  if (size < 1) fail("make_inproc_group: group size {} (must be at least 1)", size);
  auto g = std::make_shared<group_state>(size);
  std::vector<std::unique_ptr<transport>> out;
  out.reserve(size);
  for (int r = 0; r < size; ++r) out.push_back(std::make_unique<inproc_transport>(g, r, timeout));
  return out;
}

}  // namespace merak::comm
