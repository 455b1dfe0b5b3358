#include <type_traits>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/batched_gemm.h"
#include "kernels/cuda/cuda_status.h"

// Row-major on column-major cuBLAS: a row-major [r, c] matrix with row stride ld is, read
// column-major, its transpose [c, r] with leading dimension ld. So C = op(A) op(B) (row-major)
// is computed as C^T = op(B)^T op(A)^T (column-major): cuBLAS's first operand is B's buffer with
// operation N when B is used as stored (its column-major view is B^T = op(B)^T) and T when
// trans_b; likewise the second is A's buffer; m and n swap, k stays.

namespace dapple::kernels::cuda {
namespace {

template <typename T>
absl::Status Run(const KernelContext& ctx, bool trans_a, bool trans_b, int64_t m, int64_t n,
                 int64_t k, float alpha, MatrixBatch<const T> a, MatrixBatch<const T> b, float beta,
                 MatrixBatch<T> c, int64_t batch) {
  const char* op = std::is_same_v<T, float> ? "BatchedGemm (fp32)" : "BatchedGemm (bf16)";
  if (m <= 0 || n <= 0 || k <= 0 || batch <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": m ", m, ", n ", n, ", k ", k, ", batch ", batch, " must all be > 0"));
  }
  if (a.data == nullptr || b.data == nullptr || c.data == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": null device pointer"));
  }
  if (ctx.cublas == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": KernelContext has no cuBLAS handle"));
  }
  constexpr cudaDataType_t kType = std::is_same_v<T, float> ? CUDA_R_32F : CUDA_R_16BF;
  return CublasStatus(
      cublasGemmStridedBatchedEx_64(
          ctx.cublas, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, n,
          m, k, &alpha, b.data, kType, b.ld, b.stride, a.data, kType, a.ld, a.stride, &beta, c.data,
          kType, c.ld, c.stride, batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
      absl::StrCat(op, " (m ", m, ", n ", n, ", k ", k, ", batch ", batch,
                   "): cublasGemmStridedBatchedEx_64"));
}

}  // namespace

absl::Status BatchedGemm(const KernelContext& ctx, bool trans_a, bool trans_b, int64_t m, int64_t n,
                         int64_t k, float alpha, MatrixBatch<const float> a,
                         MatrixBatch<const float> b, float beta, MatrixBatch<float> c,
                         int64_t batch) {
  return Run<float>(ctx, trans_a, trans_b, m, n, k, alpha, a, b, beta, c, batch);
}
absl::Status BatchedGemm(const KernelContext& ctx, bool trans_a, bool trans_b, int64_t m, int64_t n,
                         int64_t k, float alpha, MatrixBatch<const bf16> a,
                         MatrixBatch<const bf16> b, float beta, MatrixBatch<bf16> c,
                         int64_t batch) {
  return Run<bf16>(ctx, trans_a, trans_b, m, n, k, alpha, a, b, beta, c, batch);
}

}  // namespace dapple::kernels::cuda
