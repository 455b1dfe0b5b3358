// Layer normalisation of the rows of a [rows, cols] matrix on the GPU (Ba et al., arXiv
// 1607.06450; PyTorch's nn.LayerNorm(cols, eps)), the CUDA twin of kernels/cpu/layernorm.h's
// LayerNormRows, split for Zero Bubble's B / W backward. Per row:
//   y = (x - mean) * rstd * gamma + beta,   rstd = 1 / sqrt(var + eps) in fp32,
// var the biased variance. mean and var are computed in double (two passes) and stored in
// fp32, as the CPU's saved statistics; every later use recomputes rstd from the stored var in
// fp32 exactly as the CPU does. One warp per row, reductions in a fixed order (bitwise
// reproducible run to run).
//
// Buffers: x, y, dy, dx, residual [rows, cols] of the element type (fp32 or bf16: math in fp32,
// sums in double, each stored value rounded once); gamma, beta, dgamma, dbeta [cols] and mean,
// var [rows] always fp32. rows >= 0, cols > 0, eps > 0 (else kInvalidArgument); rows == 0
// enqueues nothing. Stream-ordered (context.h). ctx.workspace, when set, holds the partial sums
// of LayerNormBackwardWeight between its two kernels (it must serve ctx.stream alone).
#ifndef DAPPLE_KERNELS_CUDA_LAYERNORM_H_
#define DAPPLE_KERNELS_CUDA_LAYERNORM_H_

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/cuda/context.h"

namespace dapple::kernels::cuda {

// Writes y, mean and var. y must not alias x.
absl::Status LayerNormForward(const KernelContext& ctx, const float* x, const float* gamma,
                              const float* beta, int64_t rows, int64_t cols, float eps, float* y,
                              float* mean, float* var);
absl::Status LayerNormForward(const KernelContext& ctx, const bf16* x, const float* gamma,
                              const float* beta, int64_t rows, int64_t cols, float eps, bf16* y,
                              float* mean, float* var);

// dx = residual + rstd * (g - mean(g) - x_hat * mean(g * x_hat)) per row, g = dy * gamma (in
// fp32), x_hat = (x - mean) * rstd: the input gradient, plus a residual branch's gradient when
// `residual` is not null (the transformer block's "dL/da + ln's dx"). dx must not alias x or
// dy; it may alias residual.
absl::Status LayerNormBackwardInput(const KernelContext& ctx, const float* x, const float* dy,
                                    const float* mean, const float* var, const float* gamma,
                                    int64_t rows, int64_t cols, float eps, const float* residual,
                                    float* dx);
absl::Status LayerNormBackwardInput(const KernelContext& ctx, const bf16* x, const bf16* dy,
                                    const float* mean, const float* var, const float* gamma,
                                    int64_t rows, int64_t cols, float eps, const bf16* residual,
                                    bf16* dx);

// dgamma += sum over rows of dy * x_hat; dbeta += sum over rows of dy: each column summed in
// double in a fixed order, rounded to fp32 once and added (as the CPU).
absl::Status LayerNormBackwardWeight(const KernelContext& ctx, const float* x, const float* dy,
                                     const float* mean, const float* var, int64_t rows,
                                     int64_t cols, float eps, float* dgamma, float* dbeta);
absl::Status LayerNormBackwardWeight(const KernelContext& ctx, const bf16* x, const bf16* dy,
                                     const float* mean, const float* var, int64_t rows,
                                     int64_t cols, float eps, float* dgamma, float* dbeta);

}  // namespace dapple::kernels::cuda

#endif  // DAPPLE_KERNELS_CUDA_LAYERNORM_H_
