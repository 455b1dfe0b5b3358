// The layout changes around batched attention GEMMs (kernels/cuda/attention.h): between the
// token-major layout of the projections and the head-major layout the strided-batched GEMMs
// need. Pure copies (bitwise).
//
//   tokens [n, seq, parts, heads, head_dim]  (a [n * seq, parts * heads * head_dim] matrix:
//          parts = 3 for q | k | v side by side, 1 for the merged attention output)
//   heads  [parts, n, heads, seq, head_dim]  (part p of sample s, head h at
//          ((p * n + s) * heads + h) * seq * head_dim)
//
// All sizes > 0 (else kInvalidArgument); `from` and `to` must not overlap. Element types fp32
// or bf16. Stream-ordered (context.h).
#ifndef DAPPLE_KERNELS_CUDA_PERMUTE_H_
#define DAPPLE_KERNELS_CUDA_PERMUTE_H_

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/cuda/context.h"

namespace dapple::kernels::cuda {

struct HeadLayout {
  int64_t n = 0;  // samples
  int64_t seq = 0;
  int64_t parts = 1;
  int64_t heads = 0;
  int64_t head_dim = 0;
};

absl::Status TokensToHeads(const KernelContext& ctx, const HeadLayout& layout, const float* from,
                           float* to);
absl::Status TokensToHeads(const KernelContext& ctx, const HeadLayout& layout, const bf16* from,
                           bf16* to);
absl::Status HeadsToTokens(const KernelContext& ctx, const HeadLayout& layout, const float* from,
                           float* to);
absl::Status HeadsToTokens(const KernelContext& ctx, const HeadLayout& layout, const bf16* from,
                           bf16* to);

}  // namespace dapple::kernels::cuda

#endif  // DAPPLE_KERNELS_CUDA_PERMUTE_H_
