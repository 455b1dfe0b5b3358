#include "absl/strings/str_cat.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/permute.h"

namespace dapple::kernels::cuda {
namespace {

// One thread per element, indexed in the token-major order (so reads or writes of a warp are
// consecutive on the token side and runs of head_dim on the head side).
template <typename T, bool kToHeads>
__global__ void PermuteKernel(HeadLayout l, const T* __restrict__ from, T* __restrict__ to) {
  const int64_t count = l.n * l.seq * l.parts * l.heads * l.head_dim;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += stride) {
    int64_t rest = i;
    const int64_t d = rest % l.head_dim;
    rest /= l.head_dim;
    const int64_t h = rest % l.heads;
    rest /= l.heads;
    const int64_t p = rest % l.parts;
    rest /= l.parts;
    const int64_t t = rest % l.seq;
    const int64_t s = rest / l.seq;
    const int64_t j = (((p * l.n + s) * l.heads + h) * l.seq + t) * l.head_dim + d;
    if constexpr (kToHeads) {
      to[j] = from[i];
    } else {
      to[i] = from[j];
    }
  }
}

template <typename T, bool kToHeads>
absl::Status Launch(const KernelContext& ctx, const HeadLayout& l, const T* from, T* to) {
  const char* op = kToHeads ? "TokensToHeads" : "HeadsToTokens";
  if (l.n <= 0 || l.seq <= 0 || l.parts <= 0 || l.heads <= 0 || l.head_dim <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": n ", l.n, ", seq ", l.seq, ", parts ",
                                                   l.parts, ", heads ", l.heads, ", head_dim ",
                                                   l.head_dim, " must all be > 0"));
  }
  if (from == nullptr || to == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": null device pointer"));
  }
  const int64_t count = l.n * l.seq * l.parts * l.heads * l.head_dim;
  PermuteKernel<T, kToHeads>
      <<<internal::GridFor(count), internal::kBlock, 0, ctx.stream>>>(l, from, to);
  return internal::LaunchStatus(op);
}

}  // namespace

absl::Status TokensToHeads(const KernelContext& ctx, const HeadLayout& layout, const float* from,
                           float* to) {
  return Launch<float, true>(ctx, layout, from, to);
}
absl::Status TokensToHeads(const KernelContext& ctx, const HeadLayout& layout, const bf16* from,
                           bf16* to) {
  return Launch<bf16, true>(ctx, layout, from, to);
}
absl::Status HeadsToTokens(const KernelContext& ctx, const HeadLayout& layout, const float* from,
                           float* to) {
  return Launch<float, false>(ctx, layout, from, to);
}
absl::Status HeadsToTokens(const KernelContext& ctx, const HeadLayout& layout, const bf16* from,
                           bf16* to) {
  return Launch<bf16, false>(ctx, layout, from, to);
}

}  // namespace dapple::kernels::cuda
