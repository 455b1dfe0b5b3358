#include "kernels/cpu/optimizer.h"

#include <cmath>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/cpu/check.h"

namespace dapple::kernels {
namespace {

constexpr double kDefaultBeta1 = 0.9;
constexpr double kDefaultBeta2 = 0.999;
constexpr double kDefaultEps = 1e-8;

// Sizes per-parameter state on the first Step and checks later calls pass the same params.
void EnsureState(const std::vector<Param*>& params, std::vector<std::vector<float>>* state,
                 const char* optimizer) {
  if (state->empty()) {
    state->resize(params.size());
    for (size_t i = 0; i < params.size(); ++i) (*state)[i].assign(params[i]->value.data.size(), 0);
    return;
  }
  DAPPLE_KERNEL_CHECK(state->size() == params.size(), optimizer, " got ", params.size(),
                      " params, its state has ", state->size());
  for (size_t i = 0; i < params.size(); ++i) {
    DAPPLE_KERNEL_CHECK((*state)[i].size() == params[i]->value.data.size(), optimizer, " param ",
                        params[i]->name, " changed size");
  }
}

int64_t HeldBytes(const std::vector<std::vector<float>>& arrays) {
  size_t floats = 0;
  for (const std::vector<float>& a : arrays) floats += a.capacity();
  return static_cast<int64_t>(floats * sizeof(float));
}

// torch.optim.SGD (dampening 0, nesterov off). The scalars are rounded to float once, as PyTorch
// does when it applies a Python float to a float32 tensor.
class Sgd : public Optimizer {
 public:
  Sgd(double momentum, double weight_decay)
      : momentum_(static_cast<float>(momentum)), weight_decay_(static_cast<float>(weight_decay)) {}

  void Step(const std::vector<Param*>& params, double lr) override {
    const float lr_f = static_cast<float>(lr);
    // Without momentum v = 0 * v + g' = g' exactly: no velocity to keep (nor its memory).
    if (momentum_ == 0 && velocity_.empty()) {
      for (Param* param : params) {
        float* w = param->value.data.data();
        const float* g = param->grad.data.data();
        const size_t n = param->value.data.size();
        for (size_t i = 0; i < n; ++i) w[i] -= lr_f * (g[i] + weight_decay_ * w[i]);
      }
      ++steps_;
      return;
    }
    EnsureState(params, &velocity_, "sgd");
    for (size_t p = 0; p < params.size(); ++p) {
      float* w = params[p]->value.data.data();
      const float* g = params[p]->grad.data.data();
      float* v = velocity_[p].data();
      const size_t n = velocity_[p].size();
      for (size_t i = 0; i < n; ++i) {
        const float d = g[i] + weight_decay_ * w[i];
        // v starts at zero, so the first step gives v = g' exactly, as PyTorch's clone.
        v[i] = momentum_ * v[i] + d;
        w[i] -= lr_f * v[i];
      }
    }
    ++steps_;
  }

  std::vector<std::string> StateNames() const override { return {"momentum"}; }
  std::vector<std::vector<std::vector<float>>> State() const override {
    if (velocity_.empty()) return {};
    // Not `return {velocity_}`: an initializer list copies its elements once more, and a
    // checkpoint's snapshot waits for every copy (docs/operations.md, "Asynchronous saving").
    std::vector<std::vector<std::vector<float>>> out;
    out.push_back(velocity_);
    return out;
  }
  int64_t steps() const override { return steps_; }
  int64_t StateBytes() const override { return HeldBytes(velocity_); }
  void SetState(std::vector<std::vector<std::vector<float>>> state, int64_t steps) override {
    // A checkpoint's velocity without momentum is the last g', which no update reads.
    velocity_ =
        state.empty() || momentum_ == 0 ? std::vector<std::vector<float>>() : std::move(state[0]);
    steps_ = steps;
  }

 private:
  float momentum_;
  float weight_decay_;
  std::vector<std::vector<float>> velocity_;
  int64_t steps_ = 0;
};

// torch.optim.AdamW (amsgrad off), following its single-tensor implementation: decoupled decay
// first, then the moments, then w -= (lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps).
class AdamW : public Optimizer {
 public:
  AdamW(double beta1, double beta2, double eps, double weight_decay)
      : beta1_(beta1), beta2_(beta2), eps_(eps), weight_decay_(weight_decay) {}

  void Step(const std::vector<Param*>& params, double lr) override {
    EnsureState(params, &m_, "adamw");
    EnsureState(params, &v_, "adamw");
    ++t_;
    // The bias corrections in double, as PyTorch computes them on Python floats.
    const double bc1 = 1.0 - std::pow(beta1_, static_cast<double>(t_));
    const double bc2 = 1.0 - std::pow(beta2_, static_cast<double>(t_));
    const float decay = static_cast<float>(1.0 - lr * weight_decay_);
    const float step_size = static_cast<float>(lr / bc1);
    const float bc2_sqrt = static_cast<float>(std::sqrt(bc2));
    const float b1 = static_cast<float>(beta1_);
    const float b2 = static_cast<float>(beta2_);
    const float one_minus_b1 = static_cast<float>(1.0 - beta1_);
    const float one_minus_b2 = static_cast<float>(1.0 - beta2_);
    const float eps = static_cast<float>(eps_);
    for (size_t p = 0; p < params.size(); ++p) {
      float* w = params[p]->value.data.data();
      const float* g = params[p]->grad.data.data();
      float* m = m_[p].data();
      float* v = v_[p].data();
      const size_t n = m_[p].size();
      for (size_t i = 0; i < n; ++i) {
        w[i] *= decay;
        m[i] = b1 * m[i] + one_minus_b1 * g[i];
        v[i] = b2 * v[i] + one_minus_b2 * g[i] * g[i];
        w[i] -= step_size * (m[i] / (std::sqrt(v[i]) / bc2_sqrt + eps));
      }
    }
  }

  std::vector<std::string> StateNames() const override { return {"adam_m", "adam_v"}; }
  std::vector<std::vector<std::vector<float>>> State() const override {
    if (m_.empty()) return {};
    std::vector<std::vector<std::vector<float>>> out;  // one copy each (see SGD's State)
    out.reserve(2);
    out.push_back(m_);
    out.push_back(v_);
    return out;
  }
  int64_t steps() const override { return t_; }
  int64_t StateBytes() const override { return HeldBytes(m_) + HeldBytes(v_); }
  void SetState(std::vector<std::vector<std::vector<float>>> state, int64_t steps) override {
    m_.clear();
    v_.clear();
    if (state.size() == 2) {
      m_ = std::move(state[0]);
      v_ = std::move(state[1]);
    }
    t_ = steps;
  }

 private:
  double beta1_;
  double beta2_;
  double eps_;
  double weight_decay_;
  int64_t t_ = 0;
  std::vector<std::vector<float>> m_;
  std::vector<std::vector<float>> v_;
};

absl::Status CheckInUnitInterval(const char* field, double value) {
  if (!(value >= 0 && value < 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("training.optimizer.", field, " ", value, " must be in [0, 1)"));
  }
  return absl::OkStatus();
}

}  // namespace

AdamWBetas AdamWBetasOf(const v1::OptimizerSpec& spec) {
  return {spec.beta1() == 0 ? kDefaultBeta1 : spec.beta1(),
          spec.beta2() == 0 ? kDefaultBeta2 : spec.beta2(),
          spec.eps() == 0 ? kDefaultEps : spec.eps()};
}

absl::StatusOr<std::unique_ptr<Optimizer>> MakeOptimizer(const v1::OptimizerSpec& spec) {
  if (spec.type() != "sgd" && spec.type() != "adamw") {
    return absl::InvalidArgumentError(
        absl::StrCat("training.optimizer.type '", spec.type(), "' is unknown; known: sgd, adamw"));
  }
  if (!(spec.lr() > 0) || !std::isfinite(spec.lr())) {
    return absl::InvalidArgumentError(
        absl::StrCat("training.optimizer.lr ", spec.lr(), " must be > 0 and finite"));
  }
  if (!(spec.weight_decay() >= 0) || !std::isfinite(spec.weight_decay())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "training.optimizer.weight_decay ", spec.weight_decay(), " must be >= 0 and finite"));
  }
  if (spec.type() == "sgd") {
    if (absl::Status s = CheckInUnitInterval("momentum", spec.momentum()); !s.ok()) return s;
    return std::unique_ptr<Optimizer>(std::make_unique<Sgd>(spec.momentum(), spec.weight_decay()));
  }
  const auto [beta1, beta2, eps] = AdamWBetasOf(spec);
  if (absl::Status s = CheckInUnitInterval("beta1", beta1); !s.ok()) return s;
  if (absl::Status s = CheckInUnitInterval("beta2", beta2); !s.ok()) return s;
  if (!(eps > 0) || !std::isfinite(eps)) {
    return absl::InvalidArgumentError(
        absl::StrCat("training.optimizer.eps ", eps, " must be > 0 and finite"));
  }
  return std::unique_ptr<Optimizer>(
      std::make_unique<AdamW>(beta1, beta2, eps, spec.weight_decay()));
}

}  // namespace dapple::kernels
