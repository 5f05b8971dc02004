#include "model/grad_buckets.hpp"

#include "core/error.hpp"

namespace merak::model {

grad_bucketer::grad_bucketer(std::vector<int64_t> param_bytes,
                             std::vector<std::vector<int>> final_after, int sparse,
                             int64_t bucket_bytes, const std::vector<int>& alone,
                             const std::vector<char>& late_nodes)
    : bytes_(std::move(param_bytes)),
      final_after_(std::move(final_after)),
      sparse_(sparse),
      limit_(bucket_bytes),
      alone_(bytes_.size(), false),
      late_(bytes_.size(), false) {
  MERAK_CHECK(sparse_ < int(bytes_.size()), "sparse parameter {} of {}", sparse_, bytes_.size());
  for (int p : alone) {
    MERAK_CHECK(p >= 0 && p < int(bytes_.size()), "parameter {} of {}", p, bytes_.size());
    alone_[size_t(p)] = true;
  }
  for (auto& ps : final_after_)
    for (int p : ps)
      MERAK_CHECK(p >= 0 && p < int(bytes_.size()), "parameter {} of {}", p, bytes_.size());
  MERAK_CHECK(late_nodes.empty() || late_nodes.size() == final_after_.size(),
              "late nodes: {} flags for {} nodes", late_nodes.size(), final_after_.size());
  for (size_t k = 0; k < late_nodes.size(); ++k)
    if (late_nodes[k])
      for (int p : final_after_[k]) late_[size_t(p)] = true;
  begin_step();
}

void grad_bucketer::begin_step() {
  in_bucket_.assign(bytes_.size(), false);
  open_.clear();
  open_bytes_ = 0;
  shipped_ = 0;
}

void grad_bucketer::take(int p, std::vector<grad_bucket>& out) {
  if (in_bucket_[size_t(p)]) return;
  in_bucket_[size_t(p)] = true;
  if (p == sparse_ || alone_[size_t(p)]) {
    out.push_back({{p}, p == sparse_});
    ++shipped_;
    return;
  }
  if (!open_.empty() && late_[size_t(p)] != open_late_) ship_open(out);
  if (open_.empty()) open_late_ = late_[size_t(p)];
  open_.push_back(p);
  open_bytes_ += bytes_[size_t(p)];
  if (open_bytes_ >= limit_) ship_open(out);
}

void grad_bucketer::ship_open(std::vector<grad_bucket>& out) {
  out.push_back({std::move(open_), false});
  ++shipped_;
  open_.clear();
  open_bytes_ = 0;
}

std::vector<grad_bucket> grad_bucketer::node_finished(int k) {
  MERAK_CHECK(k >= 0 && k < int(final_after_.size()), "node {} of {}", k, final_after_.size());
  std::vector<grad_bucket> out;
  for (int p : final_after_[size_t(k)]) take(p, out);
  return out;
}

std::vector<grad_bucket> grad_bucketer::finish() {
  std::vector<grad_bucket> out;
  for (int k = int(final_after_.size()) - 1; k >= 0; --k)
    for (int p : final_after_[size_t(k)]) take(p, out);
  for (size_t p = 0; p < in_bucket_.size(); ++p)
    MERAK_CHECK(in_bucket_[p], "parameter {} is used by no node of the stage", p);
  if (!open_.empty()) ship_open(out);
  return out;
}

std::vector<char> late_gradient_nodes(const graph& g, int first, int last, bool tensor_parallel) {
  std::vector<char> late(size_t(last - first), 0);
  if (tensor_parallel)
    for (int n = first; n < last; ++n) {
      const auto& node = g.nodes()[size_t(n)];
      late[size_t(n - first)] = node.sequence_parallel && !node.params.empty();
    }
  return late;
}

std::vector<int> backward_finish_order(int nodes, const std::vector<char>& late,
                                       const std::vector<char>& deferred) {
  auto flag = [](const std::vector<char>& v, int k) { return size_t(k) < v.size() && v[size_t(k)]; };
  std::vector<int> order, partial, postponed;
  for (int k = nodes - 1; k >= 0; --k)
    (flag(deferred, k) ? postponed : flag(late, k) ? partial : order).push_back(k);
  order.insert(order.end(), partial.begin(), partial.end());
  order.insert(order.end(), postponed.begin(), postponed.end());
  return order;
}

std::vector<std::vector<int>> gradients_final_after(const model::graph& g, int first, int last,
                                                    const std::vector<std::string>& params) {
  std::vector<std::vector<int>> out(size_t(last - first));
  for (size_t i = 0; i < params.size(); ++i)
    for (int n = first; n < last; ++n) {
      bool uses = false;
      for (auto& spec : g.nodes()[size_t(n)].params) uses = uses || spec.name == params[i];
      if (uses) {
        out[size_t(n - first)].push_back(int(i));
        break;
      }
    }
  return out;
}

}  // namespace merak::model
