#include "kernels/cuda/batchnorm_channels.h"

#include <vector>

#include "common/status.h"
#include "kernels/cpu/batchnorm2d.h"
#include "kernels/cuda/batchnorm_stats.h"
#include "kernels/cuda/cuda_status.h"

namespace dapple::kernels::cuda::internal {

DeviceBatchNorm::DeviceBatchNorm(int64_t channels, double eps, double momentum)
    : channels_(channels), eps_(static_cast<float>(eps)), momentum_(momentum) {}

DeviceBatchNorm::~DeviceBatchNorm() {
  if (sums_ != nullptr) (void)cudaFree(sums_);
}

void DeviceBatchNorm::Bind(const DeviceParam& gamma, const DeviceParam& beta, float* running_mean,
                           float* running_var) {
  gamma_ = gamma;
  beta_ = beta;
  running_mean_ = running_mean;
  running_var_ = running_var;
}

absl::Status DeviceBatchNorm::Forward(const KernelContext& ctx, const float* x, int64_t n,
                                      int64_t hw, const ForwardContext& fctx, float* y, float* mean,
                                      float* rstd) {
  if (n == 0) return absl::OkStatus();
  if (!fctx.training) {
    return op_.ForwardInference(ctx, n, channels_, hw, eps_, x, gamma_.value, beta_.value,
                                running_mean_, running_var_, y);
  }
  DAPPLE_RETURN_IF_ERROR(op_.ForwardTraining(ctx, n, channels_, hw, eps_, x, gamma_.value,
                                             beta_.value, y, mean, rstd));
  if (fctx.recompute) return absl::OkStatus();
  if (sums_ == nullptr) {
    const size_t bytes = static_cast<size_t>(2 * channels_) * sizeof(double);
    DAPPLE_CUDA_RETURN_IF_ERROR(cudaMalloc(&sums_, bytes));
    DAPPLE_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(sums_, 0, bytes, ctx.stream));
  }
  DAPPLE_RETURN_IF_ERROR(AccumulateChannelSums(ctx, x, n, channels_, hw, sums_));
  count_ += static_cast<double>(n * hw);
  return absl::OkStatus();
}

absl::Status DeviceBatchNorm::BackwardInput(const KernelContext& ctx, const float* x,
                                            const float* dy, int64_t n, int64_t hw,
                                            const float* mean, const float* rstd, float* dx,
                                            float* dgamma, float* dbeta) {
  if (n == 0) return absl::OkStatus();
  return op_.Backward(ctx, n, channels_, hw, eps_, x, dy, mean, rstd, gamma_.value, dx, dgamma,
                      dbeta);
}

absl::Status DeviceBatchNorm::BackwardWeight(const KernelContext& ctx, const float* dgamma,
                                             const float* dbeta) {
  DAPPLE_RETURN_IF_ERROR(AddInto(ctx, dgamma, gamma_.grad, channels_));
  return AddInto(ctx, dbeta, beta_.grad, channels_);
}

absl::Status DeviceBatchNorm::ReadStepStatistics(const KernelContext& ctx, double* host) {
  const size_t bytes = static_cast<size_t>(2 * channels_) * sizeof(double);
  if (sums_ == nullptr) {
    std::fill(host, host + 2 * channels_, 0.0);
  } else {
    DAPPLE_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(host, sums_, bytes, cudaMemcpyDeviceToHost, ctx.stream));
    DAPPLE_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(ctx.stream));
  }
  host[2 * channels_] = count_;
  return absl::OkStatus();
}

absl::Status DeviceBatchNorm::ApplyStepStatistics(const KernelContext& ctx, const double* summed) {
  const size_t bytes = static_cast<size_t>(channels_) * sizeof(float);
  if (summed[2 * channels_] > 0) {
    // [C] floats once per step: the host runs the CPU's formula (one place) on copies.
    std::vector<float> mean(channels_), var(channels_);
    DAPPLE_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(mean.data(), running_mean_, bytes, cudaMemcpyDeviceToHost, ctx.stream));
    DAPPLE_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(var.data(), running_var_, bytes, cudaMemcpyDeviceToHost, ctx.stream));
    DAPPLE_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(ctx.stream));
    UpdateRunningStatistics(summed, channels_, momentum_, mean.data(), var.data());
    DAPPLE_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(running_mean_, mean.data(), bytes, cudaMemcpyHostToDevice, ctx.stream));
    DAPPLE_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(running_var_, var.data(), bytes, cudaMemcpyHostToDevice, ctx.stream));
  }
  if (sums_ != nullptr) {
    DAPPLE_CUDA_RETURN_IF_ERROR(
        cudaMemsetAsync(sums_, 0, static_cast<size_t>(2 * channels_) * sizeof(double), ctx.stream));
  }
  count_ = 0;
  // The host vectors above must outlive their copies.
  DAPPLE_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(ctx.stream));
  return absl::OkStatus();
}

}  // namespace dapple::kernels::cuda::internal
