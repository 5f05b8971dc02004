#include "comm/group.hpp"

#include <algorithm>
#include <set>

#include <fmt/ranges.h>

#include "core/error.hpp"

namespace merak::comm {
namespace {

class group_view final : public transport {
 public:
  group_view(std::shared_ptr<transport> under, std::vector<int> members, int me)
      : under_(std::move(under)), members_(std::move(members)), me_(me) {
    timeout_ = under_->timeout();
  }
  int rank() const override { return me_; }
  int size() const override { return int(members_.size()); }
  std::string name() const override { return under_->name(); }
  completion isend(int peer, tag_t tag, const void* buf, size_t bytes) override {
    count_sent(bytes);
    return under_->isend(member(peer), tag, buf, bytes);
  }
  completion irecv(int peer, tag_t tag, void* buf, size_t bytes) override {
    return under_->irecv(member(peer), tag, buf, bytes);
  }
  void cancel(const std::string& why) override { under_->cancel(why); }
  int arm_event_fd() override { return under_->arm_event_fd(); }
  void begin_collective() override { under_->begin_collective(); }
  void end_collective() override { under_->end_collective(); }

 private:
  int member(int peer) const {
    MERAK_CHECK(peer >= 0 && peer < size(), "peer {} of a group of {}", peer, size());
    return members_[size_t(peer)];
  }
  std::shared_ptr<transport> under_;
  std::vector<int> members_;
  int me_;
};

}  // namespace

std::unique_ptr<transport> make_group_view(std::shared_ptr<transport> under,
                                           std::vector<int> members) {
  MERAK_CHECK(under, "group view over no transport");
  std::set<int> distinct(members.begin(), members.end());
  if (members.empty() || distinct.size() != members.size() || *distinct.begin() < 0 ||
      *distinct.rbegin() >= under->size())
    fail("group members [{}] are not distinct ranks of a group of {}", fmt::join(members, ", "),
         under->size());
  auto it = std::find(members.begin(), members.end(), under->rank());
  if (it == members.end())
    fail("rank {} is not a member of the group [{}]", under->rank(), fmt::join(members, ", "));
  int me = int(it - members.begin());
  return std::make_unique<group_view>(std::move(under), std::move(members), me);
}

}  // namespace merak::comm
