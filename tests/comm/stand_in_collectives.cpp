#include "tests/comm/stand_in_collectives.hpp"

#include <atomic>
#include <span>

#include "comm/collectives.hpp"
#include "comm/device_collectives.hpp"
#include "core/error.hpp"

namespace merak::test {
namespace {

std::atomic<long> calls{0}, made{0}, gathers{0}, bf16_gathers{0};

class stand_in_collectives final : public comm::device_collectives {
 public:
  stand_in_collectives(comm::transport& group, model::device d) : group_(group), device_(d) {}

  void allreduce_sum(model::tensor& x) override {
    staged(x, "all-reduce", [&](model::tensor& h, comm::tag_t tag) {
      if (h.type() == model::dtype::f32)
        comm::allreduce_sum(group_, h.span_f32(), tag);
      else
        comm::allreduce_sum(group_, std::span<bf16>(h.bf16s(), size_t(h.numel())), tag);
    });
  }
  void reduce_scatter_sum(model::tensor& x) override {
    staged(x, "reduce-scatter", [&](model::tensor& h, comm::tag_t tag) {
      if (h.type() == model::dtype::f32)
        comm::reduce_scatter_sum(group_, h.span_f32(), tag);
      else
        comm::reduce_scatter_sum(group_, std::span<bf16>(h.bf16s(), size_t(h.numel())), tag);
    });
  }
  void allgather_shards(model::tensor& x) override {
    staged(x, "all-gather", [&](model::tensor& h, comm::tag_t tag) {
      comm::allgather_shards(group_, h.raw(), size_t(h.numel()), model::dtype_size(h.type()), tag);
    });
    gathers.fetch_add(1, std::memory_order_relaxed);
    if (x.type() == model::dtype::bf16) bf16_gathers.fetch_add(1, std::memory_order_relaxed);
  }
  std::string name() const override { return "stand-in"; }

 private:
  template <class F>
  void staged(model::tensor& x, const char* what, F run) {
    MERAK_CHECK(x.where() == device_, "stand-in collectives of {} given a tensor on {} ({})",
                device_.str(), x.where().str(), what);
    // Tags from the upper half: the TP group's own host collectives take the
    // lower one; kmax_collective_tag - 1 is reserved.
    const comm::tag_t tag =
        comm::kmax_collective_tag / 2 + next_++ % (comm::kmax_collective_tag / 2 - 1);
    model::tensor h = x.to(model::device::cpu());
    run(h, tag);
    model::copy_bytes(x, 0, h, 0, x.bytes());
    calls.fetch_add(1, std::memory_order_relaxed);
  }

  comm::transport& group_;
  model::device device_;
  uint64_t next_ = 0;
};

}  // namespace

void register_stand_in_collectives() {
  comm::register_device_collectives(
      model::device::kind::cuda,
      [](comm::transport& group, model::device d, comm::tag_t,
         const comm::device_collectives_options&) -> std::unique_ptr<comm::device_collectives> {
        made.fetch_add(1, std::memory_order_relaxed);
        return std::make_unique<stand_in_collectives>(group, d);
      });
}

long stand_in_collective_calls() { return calls.load(); }
long stand_in_bf16_allgathers() { return bf16_gathers.load(); }
long stand_in_collectives_made() { return made.load(); }
long stand_in_allgathers() { return gathers.load(); }

}  // namespace merak::test
