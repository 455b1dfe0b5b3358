// The image ops of the CNN layers on cuDNN 9 (inside the CUDA toolkit): 2-D convolution
// (forward, backward data, backward filter with the bias gradient), max and average pooling
// (forward, backward) and batch normalisation over (N, H, W) per channel (training forward with
// the batch's statistics, inference forward with given statistics, backward): the GPU twins of
// kernels/cpu/onednn_conv.h, on the same geometries (ConvGeometry, PoolGeometry, so the output
// sizes are computed in one place) and with the same semantics.
//
// Layouts: activations NCHW ([N, C, H, W] row-major), convolution weights OIHW
// ([out_channels, C, k, k]), per-channel vectors [C]; plain fp32 device buffers owned by the
// caller, which must not alias unless stated. Every call enqueues on ctx.stream through
// ctx.cudnn (context.h; kInvalidArgument when it is null) and returns at once; a failed cuDNN
// call is kInternal naming the call ("cudnnConvolutionForward: CUDNN_STATUS_BAD_PARAM").
//
// Numerics (fp32): convolutions run with CUDNN_FMA_MATH (no TF32, no tensor-op down-conversion)
// and only with algorithms cuDNN reports deterministic, so a run repeats bitwise; sums are
// float accumulations in cuDNN's order, like oneDNN's in theirs (cudnn_ops_test.cc states the
// tolerances against the CPU ops). Batch normalisation uses the biased batch variance,
// y = (x - mean) rstd gamma + beta, rstd = 1 / sqrt(var + eps) (Ioffe & Szegedy, ICML 2015,
// Alg. 1), and keeps rstd (cuDNN's "saved inverse variance") for the backward.
//
// Each op object builds its descriptors and picks its algorithms (cudnnGet*Algorithm_v7
// heuristics: the first deterministic FMA algorithm whose workspace fits ctx.workspace_bytes)
// on the first call with a given geometry and keeps them, so steady-state calls only execute.
// The convolution workspace is ctx.workspace (the stream orders its users with cuBLAS's).
// Thread safety: one thread per object at a time.
#ifndef DAPPLE_KERNELS_CUDA_CUDNN_OPS_H_
#define DAPPLE_KERNELS_CUDA_CUDNN_OPS_H_

#include <cudnn.h>

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "kernels/cpu/onednn_conv.h"
#include "kernels/cuda/context.h"

namespace dapple::kernels::cuda {

// OkStatus for CUDNN_STATUS_SUCCESS; otherwise kInternal "<what>: <cudnnGetErrorString(err)>"
// (kUnavailable when cuDNN reports no usable GPU or driver).
absl::Status CudnnStatus(cudnnStatus_t err, absl::string_view what);

#define DAPPLE_CUDNN_RETURN_IF_ERROR(expr)                                                     \
  do {                                                                                         \
    const absl::Status _dapple_cudnn_st = ::dapple::kernels::cuda::CudnnStatus((expr), #expr); \
    if (!_dapple_cudnn_st.ok()) return _dapple_cudnn_st;                                       \
  } while (0)

// A square convolution of a batch (onednn_conv.h ConvGeometry: nn.Conv2d, dilation 1, groups 1).
class CudnnConv2d {
 public:
  CudnnConv2d();
  ~CudnnConv2d();
  CudnnConv2d(const CudnnConv2d&) = delete;
  CudnnConv2d& operator=(const CudnnConv2d&) = delete;

  // y [n, out_channels, OutH, OutW] = conv(x [n, c, h, w], weight) + bias (bias
  // [out_channels], or null for none). Overwrites y.
  absl::Status Forward(const KernelContext& ctx, const ConvGeometry& g, const float* x,
                       const float* weight, const float* bias, float* y);
  // dx [n, c, h, w] = dL/dx from dy = dL/dy. Overwrites dx, unless `accumulate`: dx += dL/dx.
  absl::Status BackwardData(const KernelContext& ctx, const ConvGeometry& g, const float* dy,
                            const float* weight, float* dx, bool accumulate = false);
  // ADDS dL/dweight into dweight [out_channels, c, k, k] and, when dbias is not null, the sum of
  // dy over (n, OutH, OutW) into dbias [out_channels] (gradients accumulate, as Param::grad).
  absl::Status BackwardFilter(const KernelContext& ctx, const ConvGeometry& g, const float* x,
                              const float* dy, float* dweight, float* dbias);

 private:
  struct Plan;
  // The plan of geometry g (built on first use; a shape change rebuilds it).
  absl::Status GetPlan(const KernelContext& ctx, const ConvGeometry& g, Plan** plan);
  std::unique_ptr<Plan> plan_;
};

// Pooling of a batch, each channel on its own (onednn_conv.h PoolGeometry and PoolKind: max
// pooling never picks padding; average pooling counts padding as zeros, count_include_pad).
class CudnnPool2d {
 public:
  explicit CudnnPool2d(PoolKind kind);
  ~CudnnPool2d();
  CudnnPool2d(const CudnnPool2d&) = delete;
  CudnnPool2d& operator=(const CudnnPool2d&) = delete;

  PoolKind kind() const { return kind_; }
  // y [n, c, OutH, OutW] = pool(x [n, c, h, w]). Overwrites y.
  absl::Status Forward(const KernelContext& ctx, const PoolGeometry& g, const float* x, float* y);
  // dx = dL/dx (overwrites) from dy and the x and y of the Forward (max pooling finds each
  // window's maximum again from them: nothing else is saved; CUDNN_POOLING_MAX_DETERMINISTIC
  // routes a tie to one element).
  absl::Status Backward(const KernelContext& ctx, const PoolGeometry& g, const float* x,
                        const float* y, const float* dy, float* dx);

 private:
  struct Plan;
  absl::Status GetPlan(const PoolGeometry& g, Plan** plan);
  PoolKind kind_;
  std::unique_ptr<Plan> plan_;
};

// Batch normalisation of x [n, c, hw] per channel over its n x hw elements
// (CUDNN_BATCHNORM_SPATIAL). eps > 0 (cuDNN's minimum is CUDNN_BN_MIN_EPSILON).
class CudnnBatchNorm {
 public:
  CudnnBatchNorm();
  ~CudnnBatchNorm();
  CudnnBatchNorm(const CudnnBatchNorm&) = delete;
  CudnnBatchNorm& operator=(const CudnnBatchNorm&) = delete;

  // Training: y = (x - mean) rstd gamma + beta with the batch's mean [c] and rstd [c] (from the
  // biased variance), which it writes for the backward. Requires n * hw >= 1. Running
  // statistics are not touched (the layer updates them once per step from its step statistics).
  absl::Status ForwardTraining(const KernelContext& ctx, int64_t n, int64_t c, int64_t hw,
                               double eps, const float* x, const float* gamma, const float* beta,
                               float* y, float* mean, float* rstd);
  // Inference: the same with the given mean [c] and variance var [c] (the running statistics).
  absl::Status ForwardInference(const KernelContext& ctx, int64_t n, int64_t c, int64_t hw,
                                double eps, const float* x, const float* gamma, const float* beta,
                                const float* mean, const float* var, float* y);
  // The exact gradient of ForwardTraining at x (with its mean and rstd): OVERWRITES dx
  // [n, c, hw], dgamma [c] = sum(dy x_hat) and dbeta [c] = sum(dy).
  absl::Status Backward(const KernelContext& ctx, int64_t n, int64_t c, int64_t hw, double eps,
                        const float* x, const float* dy, const float* mean, const float* rstd,
                        const float* gamma, float* dx, float* dgamma, float* dbeta);

 private:
  struct Plan;
  absl::Status GetPlan(int64_t n, int64_t c, int64_t hw, Plan** plan);
  std::unique_ptr<Plan> plan_;
};

// y += x for `count` fp32 elements (cudnnAddTensor): a residual add and a gradient accumulation.
absl::Status AddInto(const KernelContext& ctx, const float* x, float* y, int64_t count);

}  // namespace dapple::kernels::cuda

#endif  // DAPPLE_KERNELS_CUDA_CUDNN_OPS_H_
