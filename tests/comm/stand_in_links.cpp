#include "tests/comm/stand_in_links.hpp"

#include <atomic>

#include "comm/device_links.hpp"
#include "core/error.hpp"

namespace merak::test {
namespace {

std::atomic<long> sends{0};

// Tags of one direction: the set-up's, then a message counter's.
constexpr comm::tag_t ksetup = comm::kdevice_link_tags;
constexpr uint64_t kspace = uint64_t{1} << 40;

class stand_in_transfer final : public comm::device_transfer {
 public:
  stand_in_transfer(comm::completion c, model::tensor host, model::tensor* into)
      : c_(std::move(c)), host_(std::move(host)), into_(into) {}
  bool test() override {
    if (done_) return true;
    if (!c_.test()) return false;
    c_.wait();  // throws on a failed transfer
    if (into_) model::copy_bytes(*into_, 0, host_, 0, host_.bytes());
    done_ = true;
    return true;
  }

 private:
  comm::completion c_;
  model::tensor host_;   // the bytes on the wire
  model::tensor* into_;  // a receive's device tensor
  bool done_ = false;
};

class stand_in_link final : public comm::device_link {
 public:
  stand_in_link(comm::transport& t, int peer, model::device d) : t_(t), peer_(peer), device_(d) {
    int theirs = -1;
    const int mine = t.rank();
    auto in = t.irecv(peer, ksetup, &theirs, sizeof theirs);
    t.isend(peer, ksetup, &mine, sizeof mine).wait();
    in.wait();
    MERAK_CHECK(theirs == peer, "stand-in link of rank {} with {}: the peer says it is rank {}",
                mine, peer, theirs);
  }

  std::unique_ptr<comm::device_transfer> send(const model::tensor& x) override {
    MERAK_CHECK(x.where() == device_, "stand-in link on {} given a tensor on {}", device_.str(),
                x.where().str());
    model::tensor host = x.to(model::device::cpu());
    auto c = t_.isend(peer_, tag(++sent_), host.raw(), host.bytes());
    sends.fetch_add(1, std::memory_order_relaxed);
    return std::make_unique<stand_in_transfer>(std::move(c), std::move(host), nullptr);
  }

  std::unique_ptr<comm::device_transfer> recv(const model::shape_t& shape, model::dtype type,
                                              model::tensor& into) override {
    into = model::tensor(shape, type, device_);
    model::tensor host(shape, type);
    auto c = t_.irecv(peer_, tag(++received_), host.raw(), host.bytes());
    return std::make_unique<stand_in_transfer>(std::move(c), std::move(host), &into);
  }

  model::device where() const override { return device_; }
  std::string name() const override { return "stand-in"; }

 private:
  static comm::tag_t tag(uint64_t n) { return ksetup + 1 + (n - 1) % kspace; }

  comm::transport& t_;
  int peer_;
  model::device device_;
  uint64_t sent_ = 0, received_ = 0;
};

}  // namespace

void register_stand_in_links() {
  comm::register_device_links(
      model::device::kind::cuda,
      [](comm::transport& t, int peer, model::device d) -> std::unique_ptr<comm::device_link> {
        return std::make_unique<stand_in_link>(t, peer, d);
      });
}

long stand_in_link_sends() {
  return sends.load();
}

}  // namespace merak::test
