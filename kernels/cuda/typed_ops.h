// Internal to the layers of kernels/cuda (not a public API): the ops under one name per element
// type, so a layer written once as a template on T (float or bf16) calls them alike, and the
// few facts every layer needs (which weight copy a GEMM reads, a site's dropout mask).
#ifndef DAPPLE_KERNELS_CUDA_TYPED_OPS_H_
#define DAPPLE_KERNELS_CUDA_TYPED_OPS_H_

#include <cstdint>
#include <type_traits>

#include "absl/status/status.h"
#include "kernels/cpu/dropout.h"
#include "kernels/cuda/activations.h"
#include "kernels/cuda/context.h"
#include "kernels/cuda/layer.h"
#include "kernels/cuda/linear.h"

namespace dapple::kernels::cuda::typed {

template <typename T>
constexpr Dtype kDtype = std::is_same_v<T, float> ? Dtype::kFp32 : Dtype::kBf16;

// The weight a GEMM of element type T multiplies with: the fp32 master, or its bf16 copy.
template <typename T>
const T* GemmWeight(const DeviceParam& p);
template <>
inline const float* GemmWeight<float>(const DeviceParam& p) {
  return p.value;
}
template <>
inline const bf16* GemmWeight<bf16>(const DeviceParam& p) {
  return p.value_bf16;
}

// The mask of `site` for the forward of `ctx`, in *storage; null when dropout does nothing
// (evaluation, or p = 0: kernels/cpu/dropout.h DropoutActive).
inline const DropoutMask* MaskFor(const ForwardContext& ctx, int layer, uint32_t site, double p,
                                  DropoutMask* storage) {
  if (!DropoutActive(ctx, p)) return nullptr;
  *storage = MakeDropoutMask(ctx, layer, site, p);
  return storage;
}

// `bias` (may be null: none): in bf16 its value_bf16 goes to the GEMM's epilogue as it is.
inline absl::Status LinearForward(const KernelContext& ctx, const bf16* x, const bf16* w,
                                  const DeviceParam* bias, bf16* y, int64_t n, int64_t in,
                                  int64_t out) {
  return LinearForwardBf16(ctx, x, w, bias ? bias->value : nullptr, y, n, in, out,
                           bias ? bias->value_bf16 : nullptr);
}
inline absl::Status LinearForward(const KernelContext& ctx, const float* x, const float* w,
                                  const DeviceParam* bias, float* y, int64_t n, int64_t in,
                                  int64_t out) {
  return cuda::LinearForward(ctx, x, w, bias ? bias->value : nullptr, y, n, in, out);
}
inline absl::Status LinearBackwardInput(const KernelContext& ctx, const float* w, const float* dy,
                                        float* dx, int64_t n, int64_t in, int64_t out) {
  return cuda::LinearBackwardInput(ctx, w, dy, dx, n, in, out);
}
inline absl::Status LinearBackwardInput(const KernelContext& ctx, const bf16* w, const bf16* dy,
                                        bf16* dx, int64_t n, int64_t in, int64_t out) {
  return LinearBackwardInputBf16(ctx, w, dy, dx, n, in, out);
}
inline absl::Status LinearBackwardWeight(const KernelContext& ctx, const float* x, const float* dy,
                                         float* dw, float* db, int64_t n, int64_t in, int64_t out) {
  return cuda::LinearBackwardWeight(ctx, x, dy, dw, db, n, in, out);
}
inline absl::Status LinearBackwardWeight(const KernelContext& ctx, const bf16* x, const bf16* dy,
                                         float* dw, float* db, int64_t n, int64_t in, int64_t out) {
  return LinearBackwardWeightBf16(ctx, x, dy, dw, db, n, in, out);
}

inline absl::Status ReluForward(const KernelContext& ctx, const float* x, float* y, int64_t n) {
  return cuda::ReluForward(ctx, x, y, n);
}
inline absl::Status ReluForward(const KernelContext& ctx, const bf16* x, bf16* y, int64_t n) {
  return ReluForwardBf16(ctx, x, y, n);
}
inline absl::Status ReluBackward(const KernelContext& ctx, const float* x, const float* dy,
                                 float* dx, int64_t n) {
  return cuda::ReluBackward(ctx, x, dy, dx, n);
}
inline absl::Status ReluBackward(const KernelContext& ctx, const bf16* x, const bf16* dy, bf16* dx,
                                 int64_t n) {
  return ReluBackwardBf16(ctx, x, dy, dx, n);
}
inline absl::Status GeluForward(const KernelContext& ctx, const float* x, float* y, int64_t n) {
  return cuda::GeluForward(ctx, x, y, n);
}
inline absl::Status GeluForward(const KernelContext& ctx, const bf16* x, bf16* y, int64_t n) {
  return GeluForwardBf16(ctx, x, y, n);
}
inline absl::Status GeluBackward(const KernelContext& ctx, const float* x, const float* dy,
                                 float* dx, int64_t n) {
  return cuda::GeluBackward(ctx, x, dy, dx, n);
}
inline absl::Status GeluBackward(const KernelContext& ctx, const bf16* x, const bf16* dy, bf16* dx,
                                 int64_t n) {
  return GeluBackwardBf16(ctx, x, dy, dx, n);
}

}  // namespace dapple::kernels::cuda::typed

#endif  // DAPPLE_KERNELS_CUDA_TYPED_OPS_H_
