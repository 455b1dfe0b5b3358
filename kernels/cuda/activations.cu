#include "absl/strings/str_cat.h"
#include "kernels/cuda/activations.h"
#include "kernels/cuda/device_util.cuh"

namespace dapple::kernels::cuda {
namespace {

using internal::FromFloat;
using internal::ToFloat;

constexpr float kInvSqrt2 = 0.70710678118654752440f;
constexpr float kInvSqrt2Pi = 0.39894228040143267794f;

// The arithmetic below uses the explicitly rounded intrinsics (__fmul_rn, __fadd_rn) where nvcc
// would otherwise contract a * b + c into one FMA: the CPU reference rounds every operation, so
// this keeps the two within the libm differences of erff / expf (a couple of ulps).

struct ReluForwardOp {
  // `x < 0 ? 0 : x`, not fmaxf: NaN passes through, as on the CPU (and torch.relu).
  __device__ float operator()(float x) const { return x < 0.0f ? 0.0f : x; }
};

struct ReluBackwardOp {
  __device__ float operator()(float x, float dy) const { return x <= 0.0f ? 0.0f : dy; }
};

struct GeluForwardOp {
  __device__ float operator()(float x) const {
    const float e = erff(__fmul_rn(x, kInvSqrt2));
    return __fmul_rn(__fmul_rn(0.5f, x), __fadd_rn(1.0f, e));
  }
};

struct GeluBackwardOp {
  __device__ float operator()(float x, float dy) const {
    const float cdf = __fmul_rn(0.5f, __fadd_rn(1.0f, erff(__fmul_rn(x, kInvSqrt2))));
    const float pdf = __fmul_rn(kInvSqrt2Pi, expf(__fmul_rn(__fmul_rn(-0.5f, x), x)));
    return __fmul_rn(dy, __fadd_rn(cdf, __fmul_rn(x, pdf)));
  }
};

template <typename T, typename Op>
__global__ void UnaryKernel(const T* __restrict__ x, T* __restrict__ y, int64_t count, Op op) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += stride) {
    y[i] = FromFloat<T>(op(ToFloat(x[i])));
  }
}

// dx may alias dy (element-wise, each element read before it is written by the same thread),
// so neither carries __restrict__.
template <typename T, typename Op>
__global__ void BinaryKernel(const T* x, const T* dy, T* dx, int64_t count, Op op) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += stride) {
    dx[i] = FromFloat<T>(op(ToFloat(x[i]), ToFloat(dy[i])));
  }
}

absl::Status CheckPointers(const char* op, int64_t count, const void* a, const void* b,
                           const void* c = reinterpret_cast<const void*>(1)) {
  if (absl::Status s = internal::CheckCount(op, count); !s.ok()) return s;
  if (count > 0 && (a == nullptr || b == nullptr || c == nullptr)) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": null device pointer for ", count, " elements"));
  }
  return absl::OkStatus();
}

template <typename T, typename Op>
absl::Status LaunchUnary(const KernelContext& ctx, const char* op_name, const T* x, T* y,
                         int64_t count, Op op) {
  if (absl::Status s = CheckPointers(op_name, count, x, y); !s.ok()) return s;
  if (count == 0) return absl::OkStatus();
  UnaryKernel<<<internal::GridFor(count), internal::kBlock, 0, ctx.stream>>>(x, y, count, op);
  return internal::LaunchStatus(op_name);
}

template <typename T, typename Op>
absl::Status LaunchBinary(const KernelContext& ctx, const char* op_name, const T* x, const T* dy,
                          T* dx, int64_t count, Op op) {
  if (absl::Status s = CheckPointers(op_name, count, x, dy, dx); !s.ok()) return s;
  if (count == 0) return absl::OkStatus();
  BinaryKernel<<<internal::GridFor(count), internal::kBlock, 0, ctx.stream>>>(x, dy, dx, count, op);
  return internal::LaunchStatus(op_name);
}

}  // namespace

absl::Status ReluForward(const KernelContext& ctx, const float* x, float* y, int64_t count) {
  return LaunchUnary(ctx, "ReluForward", x, y, count, ReluForwardOp());
}
absl::Status ReluBackward(const KernelContext& ctx, const float* x, const float* dy, float* dx,
                          int64_t count) {
  return LaunchBinary(ctx, "ReluBackward", x, dy, dx, count, ReluBackwardOp());
}
absl::Status GeluForward(const KernelContext& ctx, const float* x, float* y, int64_t count) {
  return LaunchUnary(ctx, "GeluForward", x, y, count, GeluForwardOp());
}
absl::Status GeluBackward(const KernelContext& ctx, const float* x, const float* dy, float* dx,
                          int64_t count) {
  return LaunchBinary(ctx, "GeluBackward", x, dy, dx, count, GeluBackwardOp());
}

absl::Status ReluForwardBf16(const KernelContext& ctx, const bf16* x, bf16* y, int64_t count) {
  return LaunchUnary(ctx, "ReluForwardBf16", x, y, count, ReluForwardOp());
}
absl::Status ReluBackwardBf16(const KernelContext& ctx, const bf16* x, const bf16* dy, bf16* dx,
                              int64_t count) {
  return LaunchBinary(ctx, "ReluBackwardBf16", x, dy, dx, count, ReluBackwardOp());
}
absl::Status GeluForwardBf16(const KernelContext& ctx, const bf16* x, bf16* y, int64_t count) {
  return LaunchUnary(ctx, "GeluForwardBf16", x, y, count, GeluForwardOp());
}
absl::Status GeluBackwardBf16(const KernelContext& ctx, const bf16* x, const bf16* dy, bf16* dx,
                              int64_t count) {
  return LaunchBinary(ctx, "GeluBackwardBf16", x, dy, dx, count, GeluBackwardOp());
}

}  // namespace dapple::kernels::cuda
