// Optimizers. State is kept per parameter, in the order of the params vector given to Step,
// which must be the same on every call.
#ifndef DAPPLE_KERNELS_CPU_OPTIMIZER_H_
#define DAPPLE_KERNELS_CPU_OPTIMIZER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "dapple/v1/job.pb.h"
#include "kernels/cpu/layer.h"

namespace dapple::kernels {

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // One update from each Param::grad (left unchanged; the caller zeroes it) with learning rate
  // `lr` (> 0; the caller's schedule: common/lr_schedule.h LearningRate of steps(); the spec's
  // optimizer.lr is only validated here).
  //  sgd (PyTorch semantics): g' = g + wd * w; v = momentum * v + g'; w -= lr * v
  //     (v = g' on the first step, as torch.optim.SGD with dampening 0; lr rounded to float).
  //     Momentum 0 keeps no velocity (v = g' exactly, as torch.optim.SGD keeps no buffer then).
  //  adamw (Loshchilov & Hutter, ICLR 2019): w -= lr * wd * w; m = b1 m + (1-b1) g;
  //     v = b2 v + (1-b2) g^2; w -= lr * (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps)
  virtual void Step(const std::vector<Param*>& params, double lr) = 0;

  // Checkpoints. The names of the per-parameter state arrays: {"momentum"} (sgd's velocity),
  // {"adam_m", "adam_v"} (adamw's moments).
  virtual std::vector<std::string> StateNames() const = 0;
  // state[k][p]: array k (of StateNames) of the p-th parameter of Step's vector, as many
  // values as that parameter; empty (no arrays) before the first Step.
  virtual std::vector<std::vector<std::vector<float>>> State() const = 0;
  // Updates applied so far (Step calls).
  virtual int64_t steps() const = 0;
  // Bytes the state arrays hold (allocated capacity): 0 before the first Step and for sgd
  // without momentum, whose update needs no velocity (common/memory_model.h counts the same).
  virtual int64_t StateBytes() const = 0;
  // Replaces the state and the update count. `state` is empty or has StateNames().size()
  // arrays of one vector per parameter; the next Step checks the sizes against its params.
  virtual void SetState(std::vector<std::vector<std::vector<float>>> state, int64_t steps) = 0;
};

// AdamW's betas and eps as the spec means them: proto3 cannot tell an unset double from 0, so 0
// means PyTorch's default (beta1 0.9, beta2 0.999, eps 1e-8). Shared by every backend.
struct AdamWBetas {
  double beta1;
  double beta2;
  double eps;
};
AdamWBetas AdamWBetasOf(const v1::OptimizerSpec& spec);

// kInvalidArgument for an unknown type or out-of-range hyper-parameter.
absl::StatusOr<std::unique_ptr<Optimizer>> MakeOptimizer(const v1::OptimizerSpec& spec);

}  // namespace dapple::kernels

#endif  // DAPPLE_KERNELS_CPU_OPTIMIZER_H_
