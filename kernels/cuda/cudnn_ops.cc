#include "kernels/cuda/cudnn_ops.h"

#include <cstddef>
#include <initializer_list>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status.h"

// cuDNN 9 keeps these "legacy" calls (descriptors + cudnnConvolution*, cudnnPooling*,
// cudnnBatchNormalization*) next to its graph API; the graph API's usable form is the
// header-only cudnn-frontend, which no registry we reach ships (/work/shared/toolchain.md).

namespace dapple::kernels::cuda {
namespace {

// An owned cuDNN descriptor (created by Init, destroyed with the object).
template <typename T, cudnnStatus_t (*Create)(T*), cudnnStatus_t (*Destroy)(T)>
class Descriptor {
 public:
  Descriptor() = default;
  ~Descriptor() {
    if (d_ != nullptr) (void)Destroy(d_);
  }
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;

  absl::Status Init() {
    if (d_ != nullptr) return absl::OkStatus();
    return CudnnStatus(Create(&d_), "cudnnCreate*Descriptor");
  }
  T get() const { return d_; }

 private:
  T d_ = nullptr;
};

using TensorDesc =
    Descriptor<cudnnTensorDescriptor_t, cudnnCreateTensorDescriptor, cudnnDestroyTensorDescriptor>;
using FilterDesc =
    Descriptor<cudnnFilterDescriptor_t, cudnnCreateFilterDescriptor, cudnnDestroyFilterDescriptor>;
using ConvDesc = Descriptor<cudnnConvolutionDescriptor_t, cudnnCreateConvolutionDescriptor,
                            cudnnDestroyConvolutionDescriptor>;
using PoolDesc = Descriptor<cudnnPoolingDescriptor_t, cudnnCreatePoolingDescriptor,
                            cudnnDestroyPoolingDescriptor>;

absl::Status CheckHandle(const KernelContext& ctx, absl::string_view op) {
  if (ctx.cudnn == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": KernelContext has no cuDNN handle"));
  }
  return absl::OkStatus();
}

// cuDNN's 4-d descriptors take int dimensions and int strides: every size and the element
// count must fit.
absl::Status FitsInt(absl::string_view op, std::initializer_list<int64_t> dims) {
  int64_t count = 1;
  for (int64_t d : dims) {
    if (d <= 0 || d > std::numeric_limits<int>::max()) {
      return absl::InvalidArgumentError(absl::StrCat(op, ": dimension ", d, " out of range"));
    }
    count *= d;
    if (count > std::numeric_limits<int>::max()) {
      return absl::InvalidArgumentError(
          absl::StrCat(op, ": more than 2^31 - 1 elements in one tensor"));
    }
  }
  return absl::OkStatus();
}

absl::Status SetTensor(TensorDesc* desc, int64_t n, int64_t c, int64_t h, int64_t w) {
  DAPPLE_RETURN_IF_ERROR(desc->Init());
  return CudnnStatus(cudnnSetTensor4dDescriptor(desc->get(), CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT,
                                                static_cast<int>(n), static_cast<int>(c),
                                                static_cast<int>(h), static_cast<int>(w)),
                     "cudnnSetTensor4dDescriptor");
}

// The first algorithm of cuDNN's heuristic ranking that succeeded, is deterministic, computes
// with FMA math (no TF32) and whose workspace fits `limit` bytes.
template <typename Perf>
absl::Status PickAlgorithm(absl::string_view what, const Perf* perf, int count, size_t limit,
                           Perf* chosen) {
  for (int i = 0; i < count; ++i) {
    const Perf& p = perf[i];
    if (p.status != CUDNN_STATUS_SUCCESS || p.determinism != CUDNN_DETERMINISTIC ||
        p.mathType == CUDNN_TENSOR_OP_MATH || p.mathType == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION ||
        p.memory > limit) {
      continue;
    }
    *chosen = p;
    return absl::OkStatus();
  }
  return absl::InternalError(absl::StrCat(what, ": no deterministic fp32 algorithm among ", count,
                                          " within a ", limit, "-byte workspace"));
}

constexpr float kOne = 1.0f;
constexpr float kZero = 0.0f;

}  // namespace

absl::Status CudnnStatus(cudnnStatus_t err, absl::string_view what) {
  if (err == CUDNN_STATUS_SUCCESS) return absl::OkStatus();
  const std::string message = absl::StrCat(what, ": ", cudnnGetErrorString(err));
  // cuDNN 9 reports a missing driver or device as a not-initialised / architecture mismatch.
  if (err == CUDNN_STATUS_NOT_INITIALIZED || err == CUDNN_STATUS_ARCH_MISMATCH) {
    return absl::UnavailableError(message);
  }
  return absl::InternalError(message);
}

// ---- convolution ----

struct CudnnConv2d::Plan {
  ConvGeometry g;
  TensorDesc x, y, bias;
  FilterDesc w;
  ConvDesc conv;
  cudnnConvolutionFwdAlgo_t fwd;
  cudnnConvolutionBwdDataAlgo_t bwd_data;
  cudnnConvolutionBwdFilterAlgo_t bwd_filter;
  size_t fwd_bytes = 0, bwd_data_bytes = 0, bwd_filter_bytes = 0;
};

CudnnConv2d::CudnnConv2d() = default;
CudnnConv2d::~CudnnConv2d() = default;

absl::Status CudnnConv2d::GetPlan(const KernelContext& ctx, const ConvGeometry& g, Plan** plan) {
  DAPPLE_RETURN_IF_ERROR(CheckHandle(ctx, "conv2d"));
  if (plan_ != nullptr && plan_->g == g) {
    *plan = plan_.get();
    return absl::OkStatus();
  }
  plan_.reset();
  DAPPLE_RETURN_IF_ERROR(FitsInt("conv2d input", {g.n, g.c, g.h, g.w}));
  DAPPLE_RETURN_IF_ERROR(FitsInt("conv2d output", {g.n, g.out_channels, g.OutH(), g.OutW()}));
  DAPPLE_RETURN_IF_ERROR(FitsInt("conv2d weight", {g.out_channels, g.c, g.kernel, g.kernel}));
  auto p = std::make_unique<Plan>();
  p->g = g;
  DAPPLE_RETURN_IF_ERROR(SetTensor(&p->x, g.n, g.c, g.h, g.w));
  DAPPLE_RETURN_IF_ERROR(SetTensor(&p->y, g.n, g.out_channels, g.OutH(), g.OutW()));
  DAPPLE_RETURN_IF_ERROR(SetTensor(&p->bias, 1, g.out_channels, 1, 1));
  DAPPLE_RETURN_IF_ERROR(p->w.Init());
  DAPPLE_CUDNN_RETURN_IF_ERROR(cudnnSetFilter4dDescriptor(
      p->w.get(), CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, static_cast<int>(g.out_channels),
      static_cast<int>(g.c), static_cast<int>(g.kernel), static_cast<int>(g.kernel)));
  DAPPLE_RETURN_IF_ERROR(p->conv.Init());
  const int pad = static_cast<int>(g.padding), stride = static_cast<int>(g.stride);
  DAPPLE_CUDNN_RETURN_IF_ERROR(cudnnSetConvolution2dDescriptor(
      p->conv.get(), pad, pad, stride, stride, 1, 1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  DAPPLE_CUDNN_RETURN_IF_ERROR(cudnnSetConvolutionMathType(p->conv.get(), CUDNN_FMA_MATH));
  // cuDNN's output size must be the one ConvGeometry (PyTorch's rule) computes.
  int dims[4] = {0, 0, 0, 0};
  DAPPLE_CUDNN_RETURN_IF_ERROR(cudnnGetConvolution2dForwardOutputDim(
      p->conv.get(), p->x.get(), p->w.get(), &dims[0], &dims[1], &dims[2], &dims[3]));
  if (dims[2] != g.OutH() || dims[3] != g.OutW()) {
    return absl::InternalError(absl::StrCat("conv2d: cuDNN's output ", dims[2], "x", dims[3],
                                            " differs from ", g.OutH(), "x", g.OutW()));
  }
  const size_t limit = ctx.workspace != nullptr ? ctx.workspace_bytes : 0;
  int returned = 0;
  {
    cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT] = {}, chosen = {};
    DAPPLE_CUDNN_RETURN_IF_ERROR(cudnnGetConvolutionForwardAlgorithm_v7(
        ctx.cudnn, p->x.get(), p->w.get(), p->conv.get(), p->y.get(),
        CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &returned, perf));
    DAPPLE_RETURN_IF_ERROR(PickAlgorithm("conv2d forward", perf, returned, limit, &chosen));
    p->fwd = chosen.algo;
    p->fwd_bytes = chosen.memory;
  }
  {
    cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT] = {}, chosen = {};
    DAPPLE_CUDNN_RETURN_IF_ERROR(cudnnGetConvolutionBackwardDataAlgorithm_v7(
        ctx.cudnn, p->w.get(), p->y.get(), p->conv.get(), p->x.get(),
        CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &returned, perf));
    DAPPLE_RETURN_IF_ERROR(PickAlgorithm("conv2d backward data", perf, returned, limit, &chosen));
    p->bwd_data = chosen.algo;
    p->bwd_data_bytes = chosen.memory;
  }
  {
    cudnnConvolutionBwdFilterAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT] = {},
                                        chosen = {};
    DAPPLE_CUDNN_RETURN_IF_ERROR(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
        ctx.cudnn, p->x.get(), p->y.get(), p->conv.get(), p->w.get(),
        CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &returned, perf));
    DAPPLE_RETURN_IF_ERROR(PickAlgorithm("conv2d backward filter", perf, returned, limit, &chosen));
    p->bwd_filter = chosen.algo;
    p->bwd_filter_bytes = chosen.memory;
  }
  plan_ = std::move(p);
  *plan = plan_.get();
  return absl::OkStatus();
}

absl::Status CudnnConv2d::Forward(const KernelContext& ctx, const ConvGeometry& g, const float* x,
                                  const float* weight, const float* bias, float* y) {
  Plan* p = nullptr;
  DAPPLE_RETURN_IF_ERROR(GetPlan(ctx, g, &p));
  DAPPLE_CUDNN_RETURN_IF_ERROR(cudnnConvolutionForward(ctx.cudnn, &kOne, p->x.get(), x, p->w.get(),
                                                       weight, p->conv.get(), p->fwd, ctx.workspace,
                                                       p->fwd_bytes, &kZero, p->y.get(), y));
  if (bias == nullptr) return absl::OkStatus();
  DAPPLE_CUDNN_RETURN_IF_ERROR(
      cudnnAddTensor(ctx.cudnn, &kOne, p->bias.get(), bias, &kOne, p->y.get(), y));
  return absl::OkStatus();
}

absl::Status CudnnConv2d::BackwardData(const KernelContext& ctx, const ConvGeometry& g,
                                       const float* dy, const float* weight, float* dx,
                                       bool accumulate) {
  Plan* p = nullptr;
  DAPPLE_RETURN_IF_ERROR(GetPlan(ctx, g, &p));
  DAPPLE_CUDNN_RETURN_IF_ERROR(cudnnConvolutionBackwardData(
      ctx.cudnn, &kOne, p->w.get(), weight, p->y.get(), dy, p->conv.get(), p->bwd_data,
      ctx.workspace, p->bwd_data_bytes, accumulate ? &kOne : &kZero, p->x.get(), dx));
  return absl::OkStatus();
}

absl::Status CudnnConv2d::BackwardFilter(const KernelContext& ctx, const ConvGeometry& g,
                                         const float* x, const float* dy, float* dweight,
                                         float* dbias) {
  Plan* p = nullptr;
  DAPPLE_RETURN_IF_ERROR(GetPlan(ctx, g, &p));
  DAPPLE_CUDNN_RETURN_IF_ERROR(cudnnConvolutionBackwardFilter(
      ctx.cudnn, &kOne, p->x.get(), x, p->y.get(), dy, p->conv.get(), p->bwd_filter, ctx.workspace,
      p->bwd_filter_bytes, &kOne, p->w.get(), dweight));
  if (dbias == nullptr) return absl::OkStatus();
  DAPPLE_CUDNN_RETURN_IF_ERROR(
      cudnnConvolutionBackwardBias(ctx.cudnn, &kOne, p->y.get(), dy, &kOne, p->bias.get(), dbias));
  return absl::OkStatus();
}

// ---- pooling ----

struct CudnnPool2d::Plan {
  PoolGeometry g;
  TensorDesc x, y;
  PoolDesc pool;
};

CudnnPool2d::CudnnPool2d(PoolKind kind) : kind_(kind) {}
CudnnPool2d::~CudnnPool2d() = default;

absl::Status CudnnPool2d::GetPlan(const PoolGeometry& g, Plan** plan) {
  if (plan_ != nullptr && plan_->g == g) {
    *plan = plan_.get();
    return absl::OkStatus();
  }
  plan_.reset();
  DAPPLE_RETURN_IF_ERROR(FitsInt("pool2d input", {g.n, g.c, g.h, g.w}));
  auto p = std::make_unique<Plan>();
  p->g = g;
  DAPPLE_RETURN_IF_ERROR(SetTensor(&p->x, g.n, g.c, g.h, g.w));
  DAPPLE_RETURN_IF_ERROR(SetTensor(&p->y, g.n, g.c, g.OutH(), g.OutW()));
  DAPPLE_RETURN_IF_ERROR(p->pool.Init());
  // Max: the deterministic variant (a tie sends the gradient to one element, every run the
  // same). Average: padding counts as zeros in the divisor (nn.AvgPool2d's default).
  const cudnnPoolingMode_t mode = kind_ == PoolKind::kMax
                                      ? CUDNN_POOLING_MAX_DETERMINISTIC
                                      : CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING;
  const int pad = static_cast<int>(g.padding), stride = static_cast<int>(g.stride);
  DAPPLE_CUDNN_RETURN_IF_ERROR(cudnnSetPooling2dDescriptor(
      p->pool.get(), mode, CUDNN_PROPAGATE_NAN, static_cast<int>(g.kernel_h),
      static_cast<int>(g.kernel_w), pad, pad, stride, stride));
  int dims[4] = {0, 0, 0, 0};
  DAPPLE_CUDNN_RETURN_IF_ERROR(cudnnGetPooling2dForwardOutputDim(
      p->pool.get(), p->x.get(), &dims[0], &dims[1], &dims[2], &dims[3]));
  if (dims[2] != g.OutH() || dims[3] != g.OutW()) {
    return absl::InternalError(absl::StrCat("pool2d: cuDNN's output ", dims[2], "x", dims[3],
                                            " differs from ", g.OutH(), "x", g.OutW()));
  }
  plan_ = std::move(p);
  *plan = plan_.get();
  return absl::OkStatus();
}

absl::Status CudnnPool2d::Forward(const KernelContext& ctx, const PoolGeometry& g, const float* x,
                                  float* y) {
  DAPPLE_RETURN_IF_ERROR(CheckHandle(ctx, "pool2d"));
  Plan* p = nullptr;
  DAPPLE_RETURN_IF_ERROR(GetPlan(g, &p));
  DAPPLE_CUDNN_RETURN_IF_ERROR(
      cudnnPoolingForward(ctx.cudnn, p->pool.get(), &kOne, p->x.get(), x, &kZero, p->y.get(), y));
  return absl::OkStatus();
}

absl::Status CudnnPool2d::Backward(const KernelContext& ctx, const PoolGeometry& g, const float* x,
                                   const float* y, const float* dy, float* dx) {
  DAPPLE_RETURN_IF_ERROR(CheckHandle(ctx, "pool2d"));
  Plan* p = nullptr;
  DAPPLE_RETURN_IF_ERROR(GetPlan(g, &p));
  DAPPLE_CUDNN_RETURN_IF_ERROR(cudnnPoolingBackward(ctx.cudnn, p->pool.get(), &kOne, p->y.get(), y,
                                                    p->y.get(), dy, p->x.get(), x, &kZero,
                                                    p->x.get(), dx));
  return absl::OkStatus();
}

// ---- batch normalisation ----

struct CudnnBatchNorm::Plan {
  int64_t n = 0, c = 0, hw = 0;
  TensorDesc x, channel;  // x [n, c, hw, 1]; the derived per-channel [1, c, 1, 1]
};

CudnnBatchNorm::CudnnBatchNorm() = default;
CudnnBatchNorm::~CudnnBatchNorm() = default;

absl::Status CudnnBatchNorm::GetPlan(int64_t n, int64_t c, int64_t hw, Plan** plan) {
  if (plan_ != nullptr && plan_->n == n && plan_->c == c && plan_->hw == hw) {
    *plan = plan_.get();
    return absl::OkStatus();
  }
  plan_.reset();
  DAPPLE_RETURN_IF_ERROR(FitsInt("batchnorm input", {n, c, hw}));
  auto p = std::make_unique<Plan>();
  p->n = n, p->c = c, p->hw = hw;
  DAPPLE_RETURN_IF_ERROR(SetTensor(&p->x, n, c, hw, 1));
  DAPPLE_RETURN_IF_ERROR(p->channel.Init());
  DAPPLE_CUDNN_RETURN_IF_ERROR(
      cudnnDeriveBNTensorDescriptor(p->channel.get(), p->x.get(), CUDNN_BATCHNORM_SPATIAL));
  plan_ = std::move(p);
  *plan = plan_.get();
  return absl::OkStatus();
}

namespace {

absl::Status CheckEps(double eps) {
  if (!(eps >= CUDNN_BN_MIN_EPSILON && eps > 0)) {
    return absl::InvalidArgumentError(absl::StrCat("batchnorm: eps ", eps,
                                                   " must be positive and at least ",
                                                   CUDNN_BN_MIN_EPSILON, " (cuDNN's minimum)"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CudnnBatchNorm::ForwardTraining(const KernelContext& ctx, int64_t n, int64_t c,
                                             int64_t hw, double eps, const float* x,
                                             const float* gamma, const float* beta, float* y,
                                             float* mean, float* rstd) {
  DAPPLE_RETURN_IF_ERROR(CheckHandle(ctx, "batchnorm"));
  DAPPLE_RETURN_IF_ERROR(CheckEps(eps));
  Plan* p = nullptr;
  DAPPLE_RETURN_IF_ERROR(GetPlan(n, c, hw, &p));
  // No running statistics here (null, factor 0): they move once per step (cudnn_ops.h).
  DAPPLE_CUDNN_RETURN_IF_ERROR(cudnnBatchNormalizationForwardTraining(
      ctx.cudnn, CUDNN_BATCHNORM_SPATIAL, &kOne, &kZero, p->x.get(), x, p->x.get(), y,
      p->channel.get(), gamma, beta, 0.0, nullptr, nullptr, eps, mean, rstd));
  return absl::OkStatus();
}

absl::Status CudnnBatchNorm::ForwardInference(const KernelContext& ctx, int64_t n, int64_t c,
                                              int64_t hw, double eps, const float* x,
                                              const float* gamma, const float* beta,
                                              const float* mean, const float* var, float* y) {
  DAPPLE_RETURN_IF_ERROR(CheckHandle(ctx, "batchnorm"));
  DAPPLE_RETURN_IF_ERROR(CheckEps(eps));
  Plan* p = nullptr;
  DAPPLE_RETURN_IF_ERROR(GetPlan(n, c, hw, &p));
  DAPPLE_CUDNN_RETURN_IF_ERROR(cudnnBatchNormalizationForwardInference(
      ctx.cudnn, CUDNN_BATCHNORM_SPATIAL, &kOne, &kZero, p->x.get(), x, p->x.get(), y,
      p->channel.get(), gamma, beta, mean, var, eps));
  return absl::OkStatus();
}

absl::Status CudnnBatchNorm::Backward(const KernelContext& ctx, int64_t n, int64_t c, int64_t hw,
                                      double eps, const float* x, const float* dy,
                                      const float* mean, const float* rstd, const float* gamma,
                                      float* dx, float* dgamma, float* dbeta) {
  DAPPLE_RETURN_IF_ERROR(CheckHandle(ctx, "batchnorm"));
  DAPPLE_RETURN_IF_ERROR(CheckEps(eps));
  Plan* p = nullptr;
  DAPPLE_RETURN_IF_ERROR(GetPlan(n, c, hw, &p));
  DAPPLE_CUDNN_RETURN_IF_ERROR(cudnnBatchNormalizationBackward(
      ctx.cudnn, CUDNN_BATCHNORM_SPATIAL, &kOne, &kZero, &kOne, &kZero, p->x.get(), x, p->x.get(),
      dy, p->x.get(), dx, p->channel.get(), gamma, dgamma, dbeta, eps, mean, rstd));
  return absl::OkStatus();
}

absl::Status AddInto(const KernelContext& ctx, const float* x, float* y, int64_t count) {
  DAPPLE_RETURN_IF_ERROR(CheckHandle(ctx, "add"));
  if (count == 0) return absl::OkStatus();
  // A 1-d tensor as [1, 1, 1, count] (count < 2^31, as every tensor here).
  TensorDesc desc;
  DAPPLE_RETURN_IF_ERROR(FitsInt("add", {count}));
  DAPPLE_RETURN_IF_ERROR(SetTensor(&desc, 1, 1, 1, count));
  DAPPLE_CUDNN_RETURN_IF_ERROR(
      cudnnAddTensor(ctx.cudnn, &kOne, desc.get(), x, &kOne, desc.get(), y));
  return absl::OkStatus();
}

}  // namespace dapple::kernels::cuda
