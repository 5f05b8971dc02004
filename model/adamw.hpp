#pragma once
// AdamW (decoupled weight decay), global-norm gradient clipping and the
// warm-up + decay learning-rate schedule.

#include <cstdint>
#include <string_view>
#include <vector>

#include "model/backend.hpp"
#include "model/parameter.hpp"

namespace merak::model {

struct adamw_config {
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.1f;  // applied to parameters whose spec says decay
};

class adamw {
 public:
  adamw(adamw_config cfg, std::vector<parameter_ptr> params);

  // One update with learning rate `lr`, using parameter::grad. Increments
  // the step count t (bias correction uses t after the increment).
  void step(float lr) { step(lr, 1.0f, false); }
  // The same with each gradient multiplied by `grad_scale` first (gradient
  // clipping) and, with `zero_grads`, set to zero once used: one pass over
  // the gradients instead of three.
  void step(float lr, float grad_scale, bool zero_grads);

  const std::vector<parameter_ptr>& params() const { return params_; }
  std::vector<tensor>& first_moments() { return m_; }
  std::vector<tensor>& second_moments() { return v_; }
  const std::vector<tensor>& first_moments() const { return m_; }
  const std::vector<tensor>& second_moments() const { return v_; }
  int64_t t() const { return t_; }
  void set_t(int64_t t) { t_ = t; }

 private:
  adamw_config cfg_;
  std::vector<parameter_ptr> params_;
  std::vector<tensor> m_, v_;
  int64_t t_ = 0;
};

// The AdamW update of n host floats in place (w, m, v; g scaled by
// a.grad_scale, zeroed when a.zero_grad): the CPU path of adamw::step and of
// the distributed optimizer's slices, so both give the same bits.
void adamw_update_host(float* w, float* g, float* m, float* v, int64_t n,
                       const backend::adamw_args& a);

// L2 norm of all gradients together (accumulated in double, fixed order).
double global_grad_norm(const std::vector<parameter_ptr>& params);
// Scales all gradients so their global norm is at most max_norm (no-op when
// max_norm <= 0 or the norm is below it). Returns the norm before clipping.
double clip_grad_norm(const std::vector<parameter_ptr>& params, double max_norm);
// The factor clip_grad_norm scales the gradients by, for a global `norm`.
float clip_factor(double norm, double max_norm);

// How the learning rate falls after warm-up (Megatron-LM's
// --lr-decay-style): cosine or linear to min_lr, or constant at max_lr.
enum class lr_decay { cosine, linear, constant };
// "cosine", "linear" or "constant"; fails naming --lr-decay-style otherwise.
lr_decay parse_lr_decay(std::string_view name);

struct lr_schedule {
  float max_lr = 6e-4f;
  float min_lr = 6e-5f;
  int64_t warmup_steps = 0;
  float warmup_init = 0;    // the rate warm-up starts from (Megatron's --lr-warmup-init)
  int64_t total_steps = 1;  // where the decay reaches min_lr (held after)
  lr_decay style = lr_decay::cosine;
  // Learning rate of step `step` (0-based), as Megatron-LM's scheduler gives
  // it to its iteration step + 1: warm-up from warmup_init at step 0 to
  // max_lr at step warmup_steps, then the decay to min_lr at total_steps.
  float at(int64_t step) const;
};

}  // namespace merak::model
