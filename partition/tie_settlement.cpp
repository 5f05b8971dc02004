#include "partition/tie_settlement.hpp"

#include "model/backend.hpp"

#include <algorithm>

#include "core/error.hpp"

namespace merak::partition {

tie_settlement::tie_settlement(int stage, std::vector<tied_param> ties)
    : stage_(stage), ties_(std::move(ties)) {
  for (auto& t : ties_)
    MERAK_CHECK(std::find(t.holders.begin(), t.holders.end(), stage_) != t.holders.end(),
                "stage {} settles tie '{}' that it does not hold", stage_, t.name);
}

const tied_param& tie_settlement::find(const std::string& name) const {
  for (auto& t : ties_)
    if (t.name == name) return t;
  fail("stage {} holds no tied weight '{}'", stage_, name);
}

bool tie_settlement::owns(const std::string& name) const {
  return find(name).owner == stage_;
}

std::vector<tie_settlement::send> tie_settlement::begin() {
  begun_ = true;
  reported_ = false;
  settled_.clear();
  std::vector<send> out;
  for (auto& t : ties_)
    if (t.owner != stage_) out.push_back({t.name, t.owner});
  return out;
}

void tie_settlement::holder_gradient(const std::string& name, int from, model::tensor g) {
  auto& t = find(name);
  MERAK_CHECK(t.owner == stage_, "stage {} got a gradient of '{}', owned by stage {}", stage_, name,
              t.owner);
  MERAK_CHECK(
      from != stage_ && std::find(t.holders.begin(), t.holders.end(), from) != t.holders.end(),
      "stage {} got a gradient of '{}' from stage {}, which does not hold it", stage_, name, from);
  auto& box = inbox_[name];
  MERAK_CHECK(!box.count(from), "stage {} got two gradients of '{}' from stage {}", stage_, name,
              from);
  box.emplace(from, std::move(g));
}

std::vector<tie_settlement::send> tie_settlement::settle(
    const std::function<model::tensor&(const std::string&)>& grad) {
  std::vector<send> out;
  if (!begun_) return out;
  for (auto& t : ties_) {
    if (t.owner != stage_ || settled_.count(t.name)) continue;
    auto& box = inbox_[t.name];
    if (box.size() + 1 < t.holders.size()) continue;
    model::tensor& g = grad(t.name);
    for (auto& [from, h] : box) {  // ascending stage order
      MERAK_CHECK(h.numel() == g.numel(), "gradient of '{}' from stage {}: {} values, not {}",
                  t.name, from, h.numel(), g.numel());
      // On the owner's device (a holder's gradient may come from the host).
      const model::tensor there = h.where() == g.where() ? model::tensor() : h.to(g.where());
      model::backend_for(g.where()).accumulate(g, there.defined() ? there : h);
    }
    box.clear();
    for (int h : t.holders)
      if (h != stage_) out.push_back({t.name, h});
    settled_.insert(t.name);
  }
  return out;
}

void tie_settlement::owner_sum(const std::string& name) {
  auto& t = find(name);
  MERAK_CHECK(t.owner != stage_ && begun_, "stage {} got the sum of '{}' {}", stage_, name,
              t.owner == stage_ ? "that it owns" : "before its own gradient was final");
  settled_.insert(name);
}

bool tie_settlement::finished() {
  if (!begun_ || reported_ || settled_.size() < ties_.size()) return false;
  reported_ = true;
  begun_ = false;
  return true;
}

}  // namespace merak::partition
