#include "tests/model/stand_in_device.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <stdexcept>
#include <vector>

#include "model/backend.hpp"

namespace merak::test {
namespace {

using model::tensor;

std::recursive_mutex mu;
struct region {
  size_t length;
  int opened = 0;  // nested opens
};
std::map<const char*, region> regions;  // by mapping start
long host_copies = 0;
constexpr int kdevices = 4;  // cuda:0 .. cuda:3, all the same pages

size_t page_round(size_t n) {
  const size_t page = size_t(::sysconf(_SC_PAGESIZE));
  return (n + page - 1) / page * page;
}

// The mapping holding address p, if it is the stand-in's.
region* region_of(const void* p, const char** start) {
  const char* c = static_cast<const char*>(p);
  auto it = regions.upper_bound(c);
  if (it == regions.begin()) return nullptr;
  --it;
  if (c >= it->first + it->second.length) return nullptr;
  *start = it->first;
  return &it->second;
}

// The stand-in pages holding these addresses (or tensors) are readable and
// writable while it lives; the calling thread holds the stand-in's lock.
class opened {
 public:
  opened(std::initializer_list<const void*> ps) {
    for (const void* p : ps) open(p);
  }
  // A backend operation's tensors: all on one device, as a real device's
  // backend needs them (else std::logic_error naming both).
  opened(std::initializer_list<const tensor*> ts) {
    const tensor* first = nullptr;
    for (const tensor* t : ts) {
      if (!t || !t->defined()) continue;
      if (!first) first = t;
      if (!(t->where() == first->where()))
        throw std::logic_error("stand-in backend: tensors on " + first->where().str() + " and " +
                               t->where().str() + " in one operation");
      open(t->raw());
    }
  }
  ~opened() {
    for (const char* start : held_) {
      region& r = regions.at(start);
      if (--r.opened == 0 && ::mprotect(const_cast<char*>(start), r.length, PROT_NONE) != 0)
        std::abort();
    }
  }
  opened(const opened&) = delete;
  opened& operator=(const opened&) = delete;

 private:
  void open(const void* p) {
    const char* start = nullptr;
    region* r = p ? region_of(p, &start) : nullptr;
    if (!r) return;
    if (r->opened++ == 0 &&
        ::mprotect(const_cast<char*>(start), r->length, PROT_READ | PROT_WRITE) != 0)
      std::abort();
    held_.push_back(start);
  }
  std::lock_guard<std::recursive_mutex> lock_{mu};
  std::vector<const char*> held_;
};

void* allocate(size_t bytes, int) {
  std::lock_guard lock(mu);
  const size_t n = page_round(bytes);
  void* p = ::mmap(nullptr, n, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  regions[static_cast<const char*>(p)] = {n, 0};
  return p;
}
void release(void* p, int) noexcept {
  std::lock_guard lock(mu);
  auto it = regions.find(static_cast<const char*>(p));
  if (it == regions.end()) std::abort();  // not ours: a bug worth a crash
  ::munmap(p, it->second.length);
  regions.erase(it);
}
void copy(void* dst, model::device to, const void* src, model::device from, size_t bytes) {
  opened o{static_cast<const void*>(dst), src};
  if (to.type != from.type) ++host_copies;
  std::memcpy(dst, src, bytes);
}
void zero(void* p, size_t bytes, int) {
  opened o{static_cast<const void*>(p)};
  std::memset(p, 0, bytes);
}
int count() {
  return kdevices;
}
const model::device_memory_ops stand_in_memory{allocate, release, copy, zero, count, nullptr,
                                               nullptr};

// The CPU backend, with the device pages open during each call.
class stand_in_backend final : public model::backend {
 public:
  std::string_view name() const override { return "stand-in cuda:0"; }
#define FWD(call, ...)   \
  opened o{__VA_ARGS__}; \
  cpu().call
  void encoder_forward(tensor& out, const tensor& tokens, const tensor& wte,
                       const tensor& wpe) override {
    FWD(encoder_forward(out, tokens, wte, wpe), &out, &tokens, &wte, &wpe);
  }
  void encoder_backward(tensor& dwte, tensor& dwpe, const tensor& dout,
                        const tensor& tokens) override {
    FWD(encoder_backward(dwte, dwpe, dout, tokens), &dwte, &dwpe, &dout, &tokens);
  }
  void layernorm_forward(tensor& out, tensor& mean, tensor& rstd, const tensor& in,
                         const tensor& weight, const tensor& bias) override {
    FWD(layernorm_forward(out, mean, rstd, in, weight, bias), &out, &mean, &rstd, &in, &weight,
        &bias);
  }
  void layernorm_backward(tensor& din, tensor& dweight, tensor& dbias, const tensor& dout,
                          const tensor& in, const tensor& weight, const tensor& mean,
                          const tensor& rstd) override {
    FWD(layernorm_backward(din, dweight, dbias, dout, in, weight, mean, rstd), &din, &dweight,
        &dbias, &dout, &in, &weight, &mean, &rstd);
  }
  void matmul_forward(tensor& out, const tensor& in, const tensor& weight,
                      const tensor* bias) override {
    FWD(matmul_forward(out, in, weight, bias), &out, &in, &weight, bias);
  }
  void matmul_backward(tensor* din, tensor* dweight, tensor* dbias, const tensor& dout,
                       const tensor& in, const tensor& weight) override {
    FWD(matmul_backward(din, dweight, dbias, dout, in, weight), din, dweight, dbias, &dout, &in,
        &weight);
  }
  void attention_forward(tensor& out, tensor& att, const tensor& qkv, int heads) override {
    FWD(attention_forward(out, att, qkv, heads), &out, &att, &qkv);
  }
  void attention_backward(tensor& dqkv, const tensor& dout, const tensor& qkv, const tensor& att,
                          int heads) override {
    FWD(attention_backward(dqkv, dout, qkv, att, heads), &dqkv, &dout, &qkv, &att);
  }
  void gelu_forward(tensor& out, const tensor& in) override {
    FWD(gelu_forward(out, in), &out, &in);
  }
  void gelu_backward(tensor& din, const tensor& in, const tensor& dout) override {
    FWD(gelu_backward(din, in, dout), &din, &in, &dout);
  }
  void residual_forward(tensor& out, const tensor& a, const tensor& b) override {
    FWD(residual_forward(out, a, b), &out, &a, &b);
  }
  void residual_backward(tensor& da, tensor& db, const tensor& dout) override {
    FWD(residual_backward(da, db, dout), &da, &db, &dout);
  }
  void bias_forward(tensor& out, const tensor& in, const tensor& bias) override {
    FWD(bias_forward(out, in, bias), &out, &in, &bias);
  }
  void bias_backward(tensor* din, tensor& dbias, const tensor& dout) override {
    FWD(bias_backward(din, dbias, dout), din, &dbias, &dout);
  }
  void copy(tensor& dst, const tensor& src) override {
    FWD(copy(dst, src), &dst, &src);
  }
  void accumulate(tensor& dst, const tensor& src) override {
    FWD(accumulate(dst, src), &dst, &src);
  }
  void crossentropy_forward(tensor& losses, tensor& probs, const tensor& logits,
                            const tensor& targets, int valid) override {
    FWD(crossentropy_forward(losses, probs, logits, targets, valid), &losses, &probs, &logits,
        &targets);
  }
  void crossentropy_backward(tensor& dlogits, const tensor& dlosses, const tensor& probs,
                             const tensor& targets) override {
    FWD(crossentropy_backward(dlogits, dlosses, probs, targets), &dlogits, &dlosses, &probs,
        &targets);
  }
  void embedding_shard_forward(tensor& out, const tensor& tokens, const tensor& wte,
                               const tensor* wpe, int first) override {
    FWD(embedding_shard_forward(out, tokens, wte, wpe, first), &out, &tokens, &wte, wpe);
  }
  void embedding_shard_backward(tensor& dwte, tensor* dwpe, const tensor& dout,
                                const tensor& tokens, int first) override {
    FWD(embedding_shard_backward(dwte, dwpe, dout, tokens, first), &dwte, dwpe, &dout, &tokens);
  }
  void vocab_ce_stats(tensor& stats, const tensor& logits, const tensor& targets, int first,
                      int valid, int part) override {
    FWD(vocab_ce_stats(stats, logits, targets, first, valid, part), &stats, &logits, &targets);
  }
  void vocab_ce_loss(tensor& losses, const tensor& stats) override {
    FWD(vocab_ce_loss(losses, stats), &losses, &stats);
  }
  void vocab_ce_backward(tensor& dlogits, const tensor& dlosses, const tensor& logits,
                         const tensor& stats, const tensor& targets, int first,
                         int valid) override {
    FWD(vocab_ce_backward(dlogits, dlosses, logits, stats, targets, first, valid), &dlogits,
        &dlosses, &logits, &stats, &targets);
  }
  double sum_squares(const tensor& x) override {
    opened o{&x};
    return cpu().sum_squares(x);
  }
  void scale(tensor& x, float f) override {
    FWD(scale(x, f), &x);
  }
  void adamw_update(tensor& value, tensor& grad, tensor& m, tensor& v,
                    const adamw_args& a) override {
    FWD(adamw_update(value, grad, m, v, a), &value, &grad, &m, &v);
  }
#undef FWD

 private:
  static model::backend& cpu() {
    return model::backend_for(model::device::cpu());
  }
};

model::backend& stand_in(int index) {
  static stand_in_backend b;
  if (index < 0 || index >= kdevices) std::abort();
  return b;
}

}  // namespace

void register_stand_in_device() {
  model::register_device_memory(model::device::kind::cuda, &stand_in_memory);
  model::register_backend(model::device::kind::cuda, stand_in);
}

long stand_in_host_copies() {
  std::lock_guard lock(mu);
  return host_copies;
}

size_t stand_in_mapping(size_t bytes) {
  return page_round(bytes);
}

}  // namespace merak::test
