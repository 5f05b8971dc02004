#include "comm/nccl_semantics.hpp"

#include <atomic>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

#include <fmt/format.h>

#include "core/error.hpp"

namespace merak::comm {
namespace {

std::atomic<bool>& semantics_on() {
  static std::atomic<bool> on{[] {
    const char* v = std::getenv("MERAK_NCCL_SEMANTICS");
    return v && *v && std::string_view(v) != "0";
  }()};
  return on;
}

// Every message of a pair travels on this tag of the wrapped transport.
constexpr tag_t kwire_tag = 1;

// The bookkeeping of every ordered pair (src, dst) of the group: the tags
// of the sends in posting order, and how many receives were posted.
struct pairs {
  explicit pairs(int n) : P(n), sends(size_t(n) * size_t(n)), tags(sends.size()), posted(sends.size()) {}
  const int P;
  std::mutex mu;
  std::vector<uint64_t> sends;                    // sends posted
  std::vector<std::map<uint64_t, tag_t>> tags;    // send position -> its tag, until received
  std::vector<uint64_t> posted;                   // receives posted
  size_t at(int src, int dst) const { return size_t(src) * size_t(P) + size_t(dst); }
};

void pause() { std::this_thread::sleep_for(std::chrono::microseconds(50)); }

// A send: done once the wrapped send is and the peer has posted the
// receive that takes it.
class send_op final : public operation {
 public:
  send_op(completion inner, std::shared_ptr<pairs> p, int me, int peer, tag_t tag, uint64_t k)
      : inner_(std::move(inner)), p_(std::move(p)), me_(me), peer_(peer), tag_(tag), k_(k) {}
  bool test() override { return inner_.test() && taken(); }
  void wait(std::chrono::steady_clock::time_point deadline) override {
    inner_.wait();
    while (!taken()) {
      if (std::chrono::steady_clock::now() >= deadline)
        fail(
            "rank {}: send {} to rank {} (tag {}) is still waiting for rank {} to post its "
            "receive: NCCL completes a send only once the peer posts the matching receive (a "
            "rank that waits on a send before posting the receive its peer waits on deadlocks)",
            me_, k_ + 1, peer_, tag_, peer_);
      pause();
    }
  }

 private:
  bool taken() {
    std::lock_guard lock(p_->mu);
    return p_->posted[p_->at(me_, peer_)] > k_;
  }
  completion inner_;
  std::shared_ptr<pairs> p_;
  int me_, peer_;
  tag_t tag_;
  uint64_t k_;
};

// A receive: takes the k-th message of its pair whatever its tag, as NCCL
// does, and fails if that message was sent with another tag.
class recv_op final : public operation {
 public:
  recv_op(completion inner, std::shared_ptr<pairs> p, int me, int peer, tag_t tag, uint64_t k)
      : inner_(std::move(inner)), p_(std::move(p)), me_(me), peer_(peer), tag_(tag), k_(k) {}
  bool test() override {
    if (!inner_.test()) return false;
    check();
    return true;
  }
  void wait(std::chrono::steady_clock::time_point) override {
    inner_.wait();
    check();
    if (!error_.empty()) fail("{}", error_);
  }

 private:
  void check() {
    if (checked_) return;
    checked_ = true;
    tag_t sent = 0;
    {
      std::lock_guard lock(p_->mu);
      auto& m = p_->tags[p_->at(peer_, me_)];
      auto it = m.find(k_);
      if (it == m.end()) return;  // nothing arrived: the wrapped wait names why
      sent = it->second;
      m.erase(it);
    }
    if (sent != tag_)
      error_ = fmt::format(
          "rank {}: receive {} from rank {} (tag {}) takes the message rank {} sent with tag {}: "
          "NCCL matches the messages of a pair by posting order, not by tag, so the receives "
          "from a peer must be posted in the order of its sends",
          me_, k_ + 1, peer_, tag_, peer_, sent);
  }
  completion inner_;
  std::shared_ptr<pairs> p_;
  int me_, peer_;
  tag_t tag_;
  uint64_t k_;
  bool checked_ = false;
  std::string error_;
};

class nccl_semantics_transport final : public transport {
 public:
  nccl_semantics_transport(std::unique_ptr<transport> under, std::shared_ptr<pairs> p)
      : under_(std::move(under)), p_(std::move(p)) {
    timeout_ = under_->timeout();
  }
  int rank() const override { return under_->rank(); }
  int size() const override { return under_->size(); }
  std::string name() const override { return under_->name() + " (NCCL semantics)"; }

  completion isend(int peer, tag_t tag, const void* buf, size_t bytes) override {
    check_peer(peer);
    uint64_t k;
    {
      std::lock_guard lock(p_->mu);
      const size_t pair = p_->at(rank(), peer);
      k = p_->sends[pair]++;
      p_->tags[pair][k] = tag;
    }
    count_sent(bytes);
    auto inner = under_->isend(peer, kwire_tag, buf, bytes);
    return {std::make_shared<send_op>(std::move(inner), p_, rank(), peer, tag, k), timeout_};
  }
  completion irecv(int peer, tag_t tag, void* buf, size_t bytes) override {
    check_peer(peer);
    uint64_t k;
    {
      std::lock_guard lock(p_->mu);
      k = p_->posted[p_->at(peer, rank())]++;
    }
    auto inner = under_->irecv(peer, kwire_tag, buf, bytes);
    return {std::make_shared<recv_op>(std::move(inner), p_, rank(), peer, tag, k), timeout_};
  }
  void cancel(const std::string& why) override { under_->cancel(why); }
  int arm_event_fd() override { return under_->arm_event_fd(); }
  void begin_collective() override { under_->begin_collective(); }
  void end_collective() override { under_->end_collective(); }

 private:
  void check_peer(int peer) const {
    MERAK_CHECK(peer >= 0 && peer < size(), "rank {}: peer {} of a group of {}", rank(), peer,
                size());
  }
  std::unique_ptr<transport> under_;
  std::shared_ptr<pairs> p_;
};

}  // namespace

void set_nccl_semantics(bool on) { semantics_on().store(on); }
bool nccl_semantics() { return semantics_on().load(); }

std::vector<std::unique_ptr<transport>> with_nccl_semantics(
    std::vector<std::unique_ptr<transport>> group) {
  if (group.empty()) fail("with_nccl_semantics: an empty group");
  auto p = std::make_shared<pairs>(int(group.size()));
  std::vector<std::unique_ptr<transport>> out;
  for (size_t i = 0; i < group.size(); ++i) {
    MERAK_CHECK(group[i] && group[i]->rank() == int(i) && group[i]->size() == int(group.size()),
                "with_nccl_semantics: endpoint {} is not rank {} of {}", i, i, group.size());
    out.push_back(std::make_unique<nccl_semantics_transport>(std::move(group[i]), p));
  }
  return out;
}

}  // namespace merak::comm
