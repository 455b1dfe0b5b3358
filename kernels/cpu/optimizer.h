// Optimizers. State is kept per parameter, in the order of the params vector given to Step,
// which must be the same on every call.
#ifndef DAPPLE_KERNELS_CPU_OPTIMIZER_H_
#define DAPPLE_KERNELS_CPU_OPTIMIZER_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "dapple/v1/job.pb.h"
#include "kernels/cpu/layer.h"

namespace dapple::kernels {

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // One update from each Param::grad (left unchanged; the caller zeroes it).
  //  sgd (PyTorch semantics): g' = g + wd * w; v = momentum * v + g'; w -= lr * v
  //     (v = g' on the first step, as torch.optim.SGD with dampening 0).
  //  adamw (Loshchilov & Hutter, ICLR 2019): w -= lr * wd * w; m = b1 m + (1-b1) g;
  //     v = b2 v + (1-b2) g^2; w -= lr * (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps)
  virtual void Step(const std::vector<Param*>& params) = 0;
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
