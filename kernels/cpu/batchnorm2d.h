// Batch normalisation per channel of a [C, H, W] input over (N, H, W) (Ioffe & Szegedy, ICML
// 2015): PyTorch's nn.BatchNorm2d(C, eps, momentum) in training mode on each micro-batch, with
// its running statistics updated once per step from the whole step's batch (docs/layers.md,
// "Batch normalisation"; common/model/batchnorm2d.cc).
#ifndef DAPPLE_KERNELS_CPU_BATCHNORM2D_H_
#define DAPPLE_KERNELS_CPU_BATCHNORM2D_H_

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/cpu/layer.h"
#include "kernels/cpu/onednn_conv.h"

namespace dapple::kernels {

// eps and momentum when the spec leaves them out (PyTorch's defaults).
constexpr double kDefaultBatchNormEps = 1e-5;
constexpr double kDefaultBatchNormMomentum = 0.1;

// The once-per-step update of running statistics from step statistics `summed` ([sum [C],
// sum of squares [C], count], summed over replicas), PyTorch's: mean = sum / count, the
// unbiased var = (sumsq - sum mean) / (count - 1) (clamped at 0),
//   running_mean = (1 - momentum) running_mean + momentum mean,
//   running_var  = (1 - momentum) running_var  + momentum var,
// in double then rounded to float. Count 0 changes nothing; a count below 2 leaves running_var
// unchanged (the unbiased variance of one element is undefined). running_mean and running_var
// are [C] host arrays. Shared by the CPU and the CUDA layers: one formula.
void UpdateRunningStatistics(const double* summed, int64_t channels, double momentum,
                             float* running_mean, float* running_var);

// One batch normalisation of C channels: its parameters, buffers and step statistics, shared by
// BatchNorm2dLayer and ResidualBlockLayer (which has three). Names are `prefix` + "weight"
// (gamma [C], starts at 1), "bias" (beta [C], starts at 0), "running_mean" ([C], starts at 0)
// and "running_var" ([C], starts at 1).
//
// Training (Forward with training true): y = (x - mean) rstd gamma + beta with the biased
// mean and variance of the rows given (one micro-batch on one replica), rstd = 1 / sqrt(var +
// eps), on oneDNN (onednn_conv.h BatchNormOp); it also adds, in double, each channel's sum and
// sum of squares of x and the element count n hw to the step statistics. Evaluation: the same
// with running_mean and running_var. Step statistics (layer.h): [sum [C], sum of squares [C],
// count], and ApplyStepStatistics sets, with the summed values, mean = sum / count and the
// unbiased var = (sumsq - sum mean) / (count - 1):
//   running_mean = (1 - momentum) running_mean + momentum mean,
//   running_var  = (1 - momentum) running_var  + momentum var     (PyTorch's update),
// in double then rounded to float; a count below 2 leaves running_var unchanged (the unbiased
// variance of one element is undefined: PyTorch refuses such a batch in training).
//
// Buffers are [n, C, hw] row-major fp32 owned by the caller. One thread per object.
class BatchNormChannels {
 public:
  // Requires channels > 0, eps in (0, 1), momentum in [0, 1].
  BatchNormChannels(const std::string& prefix, int64_t channels, double eps, double momentum);

  int64_t channels() const { return channels_; }
  // y [n, C, hw] from x. Training: writes the batch mean and biased variance into *mean and
  // *var (resized to [C]; BackwardInput needs them) and accumulates the step statistics unless
  // ctx.recompute (the micro-batch was counted by its first Forward). Evaluation
  // (ctx.training false): mean and var are not touched (may be null).
  void Forward(const float* x, int64_t n, int64_t hw, const ForwardContext& ctx, float* y,
               Tensor* mean, Tensor* var);
  // From the x, mean and var of a training Forward and dy = dL/dy: writes dx (overwrites; may
  // be null) and the parameter gradients dgamma and dbeta (resized to [C]) for BackwardWeight.
  void BackwardInput(const float* x, const float* dy, int64_t n, int64_t hw, const Tensor& mean,
                     const Tensor& var, float* dx, Tensor* dgamma, Tensor* dbeta);
  // weight.grad += dgamma; bias.grad += dbeta.
  void BackwardWeight(const Tensor& dgamma, const Tensor& dbeta);

  Param& weight() { return weight_; }
  Param& bias() { return bias_; }
  Param& running_mean() { return running_mean_; }
  Param& running_var() { return running_var_; }

  int64_t StepStatisticsSize() const { return 2 * channels_ + 1; }
  void ReadStepStatistics(double* out) const;
  void ApplyStepStatistics(const double* summed);

 private:
  int64_t channels_;
  float eps_;
  double momentum_;
  Param weight_, bias_, running_mean_, running_var_;
  std::vector<double> step_;  // [sum [C], sum of squares [C], count]
  BatchNormOp op_;
  std::vector<float> scratch_;  // dx when the caller wants none
};

// The batchnorm2d layer: x [N, C, H, W] -> y of the same shape. Parameters, in common/model's
// order: "layer<i>.weight" [C], "layer<i>.bias" [C]; buffers "layer<i>.running_mean" [C],
// "layer<i>.running_var" [C]. cache->saved after a training Forward: the batch mean and biased
// variance ([C] each); cache->grads after BackwardInput: dgamma and dbeta ([C] each). A
// mismatched x or dy aborts (kernels/cpu/check.h); dx must not alias x, y or dy. One thread
// per layer object.
class BatchNorm2dLayer : public Layer {
 public:
  BatchNorm2dLayer(int layer_index, int64_t channels, int64_t height, int64_t width, double eps,
                   double momentum);

  std::string Type() const override { return "batchnorm2d"; }
  void Forward(const Tensor& x, Tensor* y, LayerCache* cache, const ForwardContext& ctx) override;
  void BackwardInput(const Tensor& x, const Tensor& y, const Tensor& dy, Tensor* dx,
                     LayerCache* cache) override;
  void BackwardWeight(const Tensor& x, const Tensor& y, const Tensor& dy,
                      LayerCache* cache) override;
  // {weight, bias}.
  std::vector<Param*> Params() override { return {&norm_.weight(), &norm_.bias()}; }
  // {running_mean, running_var}.
  std::vector<Param*> Buffers() override { return {&norm_.running_mean(), &norm_.running_var()}; }
  int64_t StepStatisticsSize() const override { return norm_.StepStatisticsSize(); }
  void ReadStepStatistics(double* out) const override { norm_.ReadStepStatistics(out); }
  void ApplyStepStatistics(const double* summed) override { norm_.ApplyStepStatistics(summed); }

  BatchNormChannels& norm() { return norm_; }

 private:
  // Rows N of x (aborts unless x is [N, C, H, W] and dy, when given, has x's shape).
  int64_t Rows(const Tensor& x, const Tensor* dy) const;

  int layer_index_;
  int64_t height_, width_;
  BatchNormChannels norm_;
};

}  // namespace dapple::kernels

#endif  // DAPPLE_KERNELS_CPU_BATCHNORM2D_H_
