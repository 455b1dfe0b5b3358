// Strided-batched GEMMs in row-major terms on cuBLAS (cublasGemmStridedBatchedEx): the per-head
// products of attention (kernels/cuda/attention.h), all heads of all samples in one call.
//
// For b < batch: C_b = alpha op(A_b) op(B_b) + beta C_b, with op(A_b) [m, k], op(B_b) [k, n],
// C_b [m, n], each row-major with the given row stride (ld) and matrix b at base + b * stride.
// op(X) = X^T when trans_x (then X_b is stored [k, m] or [n, k]). fp32 accumulation
// (CUBLAS_COMPUTE_32F: pure fp32 for fp32 inputs as long as the handle's math mode allows no
// TF32, as worker/device sets it; fp32 accumulation of bf16 products for bf16 inputs).
// m, n, k, batch > 0 (else kInvalidArgument); C_b must not overlap each other or the inputs.
// Stream-ordered (context.h).
#ifndef DAPPLE_KERNELS_CUDA_BATCHED_GEMM_H_
#define DAPPLE_KERNELS_CUDA_BATCHED_GEMM_H_

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/cuda/context.h"

namespace dapple::kernels::cuda {

template <typename T>
struct MatrixBatch {
  T* data = nullptr;
  int64_t ld = 0;      // row stride, elements
  int64_t stride = 0;  // between consecutive matrices, elements
};

absl::Status BatchedGemm(const KernelContext& ctx, bool trans_a, bool trans_b, int64_t m, int64_t n,
                         int64_t k, float alpha, MatrixBatch<const float> a,
                         MatrixBatch<const float> b, float beta, MatrixBatch<float> c,
                         int64_t batch);
absl::Status BatchedGemm(const KernelContext& ctx, bool trans_a, bool trans_b, int64_t m, int64_t n,
                         int64_t k, float alpha, MatrixBatch<const bf16> a,
                         MatrixBatch<const bf16> b, float beta, MatrixBatch<bf16> c, int64_t batch);

}  // namespace dapple::kernels::cuda

#endif  // DAPPLE_KERNELS_CUDA_BATCHED_GEMM_H_
