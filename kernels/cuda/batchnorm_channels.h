// One batch normalisation of C channels on the GPU, shared by the batchnorm2d and
// residual_block layers: the twin of kernels/cpu/batchnorm2d.h's BatchNormChannels on cuDNN
// (cudnn_ops.h CudnnBatchNorm) with the same semantics: training normalises with the rows
// given (one micro-batch), evaluation with the running statistics, and training Forwards
// accumulate the step statistics [sum [C], sum of squares [C], count] in double
// (batchnorm_stats.h), applied once per step by UpdateRunningStatistics (the CPU's formula).
//
// gamma / beta are DeviceParams and the running statistics device buffers, all owned by the
// layer's caller (Bind). The step statistics' accumulator ([2C] doubles of device memory) is
// this object's own: allocated on the first training Forward, freed with the object.
// Buffers are [n, C, hw] fp32 device memory. One thread per object.
#ifndef DAPPLE_KERNELS_CUDA_BATCHNORM_CHANNELS_H_
#define DAPPLE_KERNELS_CUDA_BATCHNORM_CHANNELS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/cuda/context.h"
#include "kernels/cuda/cudnn_ops.h"
#include "kernels/cuda/layer.h"

namespace dapple::kernels::cuda::internal {

class DeviceBatchNorm {
 public:
  DeviceBatchNorm(int64_t channels, double eps, double momentum);
  ~DeviceBatchNorm();
  DeviceBatchNorm(const DeviceBatchNorm&) = delete;
  DeviceBatchNorm& operator=(const DeviceBatchNorm&) = delete;

  int64_t channels() const { return channels_; }
  void Bind(const DeviceParam& gamma, const DeviceParam& beta, float* running_mean,
            float* running_var);

  // y from x. Training (fctx.training): writes the batch mean and rstd ([C] each: the
  // backward's) and adds x's sums to the step statistics, except in a recomputing Forward
  // (fctx.recompute: the first Forward counted them). Evaluation: the running statistics; mean
  // and rstd unused.
  absl::Status Forward(const KernelContext& ctx, const float* x, int64_t n, int64_t hw,
                       const ForwardContext& fctx, float* y, float* mean, float* rstd);
  // From a training Forward's x, mean and rstd and dy: dx (overwrites; `dx` must not be null:
  // cuDNN computes it with the parameter gradients) and dgamma, dbeta ([C] each, overwritten).
  absl::Status BackwardInput(const KernelContext& ctx, const float* x, const float* dy, int64_t n,
                             int64_t hw, const float* mean, const float* rstd, float* dx,
                             float* dgamma, float* dbeta);
  // gamma.grad += dgamma; beta.grad += dbeta.
  absl::Status BackwardWeight(const KernelContext& ctx, const float* dgamma, const float* dbeta);

  int64_t StepStatisticsSize() const { return 2 * channels_ + 1; }
  absl::Status ReadStepStatistics(const KernelContext& ctx, double* host);
  absl::Status ApplyStepStatistics(const KernelContext& ctx, const double* summed);

 private:
  int64_t channels_;
  double eps_;  // the CPU's float eps, widened
  double momentum_;
  DeviceParam gamma_, beta_;
  float* running_mean_ = nullptr;
  float* running_var_ = nullptr;
  double* sums_ = nullptr;  // device [sum [C], sum of squares [C]]
  double count_ = 0;        // elements accumulated (host: it does not depend on the data)
  CudnnBatchNorm op_;
};

}  // namespace dapple::kernels::cuda::internal

#endif  // DAPPLE_KERNELS_CUDA_BATCHNORM_CHANNELS_H_
