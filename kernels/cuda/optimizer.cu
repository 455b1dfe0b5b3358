#include <cmath>
#include <initializer_list>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/optimizer.h"

namespace dapple::kernels::cuda {
namespace {

// Every update rounds each operation on its own (__fmul_rn, __fadd_rn, __fsqrt_rn, __fdiv_rn:
// never contracted into FMAs) in the order kernels/cpu/optimizer.cc writes it, with the same
// float scalars, so a GPU step reproduces the CPU step bit for bit.

__global__ void SgdKernel(float* __restrict__ w, const float* __restrict__ g, float* __restrict__ v,
                          int64_t count, float lr, float momentum, float weight_decay) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += stride) {
    const float wi = w[i];
    const float d = __fadd_rn(g[i], __fmul_rn(weight_decay, wi));
    const float vi = __fadd_rn(__fmul_rn(momentum, v[i]), d);
    v[i] = vi;
    w[i] = __fsub_rn(wi, __fmul_rn(lr, vi));
  }
}

struct AdamWScalars {
  float decay;      // 1 - lr * wd
  float step_size;  // lr / bc1
  float bc2_sqrt;   // sqrt(bc2)
  float b1;
  float b2;
  float one_minus_b1;
  float one_minus_b2;
  float eps;
};

__global__ void AdamWKernel(float* __restrict__ w, const float* __restrict__ g,
                            float* __restrict__ m, float* __restrict__ v, int64_t count,
                            AdamWScalars s) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += stride) {
    const float gi = g[i];
    const float wi = __fmul_rn(w[i], s.decay);
    const float mi = __fadd_rn(__fmul_rn(s.b1, m[i]), __fmul_rn(s.one_minus_b1, gi));
    const float vi = __fadd_rn(__fmul_rn(s.b2, v[i]), __fmul_rn(__fmul_rn(s.one_minus_b2, gi), gi));
    m[i] = mi;
    v[i] = vi;
    const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), s.bc2_sqrt), s.eps);
    w[i] = __fsub_rn(wi, __fmul_rn(s.step_size, __fdiv_rn(mi, denom)));
  }
}

__global__ void ToBf16Kernel(const float* __restrict__ in, bf16* __restrict__ out, int64_t count) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += stride) {
    out[i] = __float2bfloat16_rn(in[i]);
  }
}

__global__ void ToFloatKernel(const bf16* __restrict__ in, float* __restrict__ out, int64_t count) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += stride) {
    out[i] = __bfloat162float(in[i]);
  }
}

absl::Status CheckArrays(const char* op, int64_t count, std::initializer_list<const void*> ptrs) {
  if (absl::Status s = internal::CheckCount(op, count); !s.ok()) return s;
  if (count == 0) return absl::OkStatus();
  for (const void* p : ptrs) {
    if (p == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(op, ": null device pointer for ", count, " elements"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status SgdStep(const KernelContext& ctx, float* w, const float* g, float* v, int64_t count,
                     float lr, float momentum, float weight_decay) {
  if (absl::Status s = CheckArrays("SgdStep", count, {w, g, v}); !s.ok()) return s;
  if (count == 0) return absl::OkStatus();
  SgdKernel<<<internal::GridFor(count), internal::kBlock, 0, ctx.stream>>>(w, g, v, count, lr,
                                                                           momentum, weight_decay);
  return internal::LaunchStatus("SgdStep");
}

absl::Status AdamWStep(const KernelContext& ctx, float* w, const float* g, float* m, float* v,
                       int64_t count, double lr, double beta1, double beta2, double eps,
                       double weight_decay, int64_t t) {
  if (absl::Status s = CheckArrays("AdamWStep", count, {w, g, m, v}); !s.ok()) return s;
  if (t < 1) {
    return absl::InvalidArgumentError(absl::StrCat("AdamWStep: step t ", t, " must be >= 1"));
  }
  if (count == 0) return absl::OkStatus();
  // The scalars exactly as kernels/cpu/optimizer.cc derives them: bias corrections in double
  // (PyTorch's Python floats), each rounded to float once.
  const double bc1 = 1.0 - std::pow(beta1, static_cast<double>(t));
  const double bc2 = 1.0 - std::pow(beta2, static_cast<double>(t));
  AdamWScalars s;
  s.decay = static_cast<float>(1.0 - lr * weight_decay);
  s.step_size = static_cast<float>(lr / bc1);
  s.bc2_sqrt = static_cast<float>(std::sqrt(bc2));
  s.b1 = static_cast<float>(beta1);
  s.b2 = static_cast<float>(beta2);
  s.one_minus_b1 = static_cast<float>(1.0 - beta1);
  s.one_minus_b2 = static_cast<float>(1.0 - beta2);
  s.eps = static_cast<float>(eps);
  AdamWKernel<<<internal::GridFor(count), internal::kBlock, 0, ctx.stream>>>(w, g, m, v, count, s);
  return internal::LaunchStatus("AdamWStep");
}

absl::Status CastToBf16(const KernelContext& ctx, const float* in, bf16* out, int64_t count) {
  if (absl::Status s = CheckArrays("CastToBf16", count, {in, out}); !s.ok()) return s;
  if (count == 0) return absl::OkStatus();
  ToBf16Kernel<<<internal::GridFor(count), internal::kBlock, 0, ctx.stream>>>(in, out, count);
  return internal::LaunchStatus("CastToBf16");
}

absl::Status CastToFloat(const KernelContext& ctx, const bf16* in, float* out, int64_t count) {
  if (absl::Status s = CheckArrays("CastToFloat", count, {in, out}); !s.ok()) return s;
  if (count == 0) return absl::OkStatus();
  ToFloatKernel<<<internal::GridFor(count), internal::kBlock, 0, ctx.stream>>>(in, out, count);
  return internal::LaunchStatus("CastToFloat");
}

}  // namespace dapple::kernels::cuda
