// Fully connected layer on the GPU: y = x W^T + b (torch.nn.Linear), the CUDA twin of
// kernels/cpu/linear.h, on cuBLAS.
//
// Layouts (row-major, PyTorch's): x [n, in], W [out, in], b [out], y [n, out], dy [n, out],
// dx [n, in], dW [out, in], db [out]. n, in, out > 0 (else kInvalidArgument). A null b means no
// bias (the LM head): y = x W^T, and a null db computes no bias gradient.
// fp32: plain fp32 GEMMs (CUBLAS_COMPUTE_32F, no TF32), so results match the CPU reference up to
// summation order. bf16: bf16 inputs and outputs with fp32 accumulation; the parameter
// gradients are accumulated in fp32 (mixed precision with fp32 master weights: the optimizer
// updates fp32 weights and CastToBf16 refreshes the bf16 copy used here).
// Stream-ordered (context.h). `dx` must not alias x, y, W or dy.
// ctx.workspace, when set, also holds scratch between the kernels of one call (the bias
// gradient, the bf16 copy of b for the fused bf16 bias), so it must serve ctx.stream alone;
// with it null the ops still work, with a bias kernel instead of the fused bf16 bias epilogue
// and a column-sum kernel for the bias gradient. The bf16 forward adds b rounded to bf16.
// The bias gradient: normally in the dW GEMM's epilogue (cuBLASLt CUBLASLT_EPILOGUE_BGRADB,
// written to the workspace, then added to db), else by a column-sum kernel with a fixed
// summation order. Either is bitwise reproducible run to run on one GPU model, cuBLAS version
// and shape (cuBLAS's reproducibility guarantee; the algorithm is chosen once per shape and
// cached), but the two order their sums differently, so they agree to rounding, not bitwise.
#ifndef DAPPLE_KERNELS_CUDA_LINEAR_H_
#define DAPPLE_KERNELS_CUDA_LINEAR_H_

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/cuda/context.h"

namespace dapple::kernels::cuda {

// y = x W^T + b.
absl::Status LinearForward(const KernelContext& ctx, const float* x, const float* w, const float* b,
                           float* y, int64_t n, int64_t in, int64_t out);
// dW += dy^T x; db += column sums of dy; dx = dy W when dx is not null.
absl::Status LinearBackward(const KernelContext& ctx, const float* x, const float* w,
                            const float* dy, float* dw, float* db, float* dx, int64_t n, int64_t in,
                            int64_t out);

// Zero Bubble's B / W split (Qi et al., ICLR 2024) of LinearBackward: dx = dy W, and
// dW += dy^T x with db += column sums of dy. The same GEMMs and reductions as LinearBackward.
absl::Status LinearBackwardInput(const KernelContext& ctx, const float* w, const float* dy,
                                 float* dx, int64_t n, int64_t in, int64_t out);
absl::Status LinearBackwardWeight(const KernelContext& ctx, const float* x, const float* dy,
                                  float* dw, float* db, int64_t n, int64_t in, int64_t out);

// bf16 twins: x, w, y, dy, dx in bf16; b, dw, db in fp32. `b16` (optional): b rounded to bf16
// (the owner's DeviceParam::value_bf16, refreshed with the weights), which cuBLASLt's bias
// epilogue reads on a bf16 output; null: b is rounded into the workspace at each call (one more
// kernel, which the small GEMMs of a layer feel: bench/linear_cuda_bench).
absl::Status LinearForwardBf16(const KernelContext& ctx, const bf16* x, const bf16* w,
                               const float* b, bf16* y, int64_t n, int64_t in, int64_t out,
                               const bf16* b16 = nullptr);
absl::Status LinearBackwardBf16(const KernelContext& ctx, const bf16* x, const bf16* w,
                                const bf16* dy, float* dw, float* db, bf16* dx, int64_t n,
                                int64_t in, int64_t out);
absl::Status LinearBackwardInputBf16(const KernelContext& ctx, const bf16* w, const bf16* dy,
                                     bf16* dx, int64_t n, int64_t in, int64_t out);
absl::Status LinearBackwardWeightBf16(const KernelContext& ctx, const bf16* x, const bf16* dy,
                                      float* dw, float* db, int64_t n, int64_t in, int64_t out);

}  // namespace dapple::kernels::cuda

#endif  // DAPPLE_KERNELS_CUDA_LINEAR_H_
