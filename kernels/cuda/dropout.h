// Dropout on the GPU with the CPU's mask function (kernels/cpu/dropout_mask.h, shared source),
// so a GPU stage drops exactly the elements a CPU stage drops for the same (seed, step, sample,
// layer, site, element): the keep decisions are bitwise identical and the kept values are
// in * scale rounded once, as kernels/cpu/dropout.h's ApplyDropout computes them.
//
// Layout: `rows` samples of `per_sample` elements, row-major; row r is sample
// mask->first_sample + r. With `mask` null (evaluation, or p = 0) the mask is the identity.
// Optionally fused with a residual add (the transformer block's "x + dropout(branch)"):
//   out[r, e] = residual[r, e] + (keep(r, e) ? in[r, e] * scale : 0)
// computed in fp32 with one rounding per operation (no FMA contraction), so for fp32 it is
// bitwise the CPU's result. For bf16 the math is fp32 and `out` is rounded once.
// Element-wise: `out` may alias `in` or `residual`. rows, per_sample >= 0 (else
// kInvalidArgument); nothing is enqueued for an empty batch. Stream-ordered (context.h).
#ifndef DAPPLE_KERNELS_CUDA_DROPOUT_H_
#define DAPPLE_KERNELS_CUDA_DROPOUT_H_

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/cpu/dropout_mask.h"
#include "kernels/cuda/context.h"

namespace dapple::kernels::cuda {

// `residual` may be null (no add). Overloads by element type; the bf16 -> fp32 one writes the
// masked values of a bf16 tensor in fp32 (the embedding's backward sums them in fp32).
absl::Status Dropout(const KernelContext& ctx, const DropoutMask* mask, int64_t rows,
                     int64_t per_sample, const float* in, const float* residual, float* out);
absl::Status Dropout(const KernelContext& ctx, const DropoutMask* mask, int64_t rows,
                     int64_t per_sample, const bf16* in, const bf16* residual, bf16* out);
absl::Status Dropout(const KernelContext& ctx, const DropoutMask* mask, int64_t rows,
                     int64_t per_sample, const bf16* in, const float* residual, float* out);

}  // namespace dapple::kernels::cuda

#endif  // DAPPLE_KERNELS_CUDA_DROPOUT_H_
