// Internal to kernels/cuda (tests and the benchmark): which GEMM paths the Linear ops may take,
// and which they took. Not for production callers.
//
// LinearForward normally runs ONE cuBLASLt matmul with the bias fused in its epilogue
// (CUBLASLT_EPILOGUE_BIAS). When cuBLASLt offers no algorithm for that (for example a bf16
// output with an fp32 bias on some cuBLAS version), it falls back to broadcasting the bias into
// y and a plain GEMM with beta = 1 (the CPU reference's formulation). The weight gradient
// normally computes the bias gradient in its GEMM's epilogue (CUBLASLT_EPILOGUE_BGRADB) and
// falls back to a column-sum kernel where cuBLASLt has no algorithm for that. Plain GEMMs use
// cuBLASLt and fall back to cublasGemmEx if cuBLASLt has no algorithm. Tests force each fallback so
// every path is checked against the CPU reference on whatever GPU runs them.
// Thread safety: the settings and counters are per thread.
#ifndef DAPPLE_KERNELS_CUDA_LINEAR_INTERNAL_H_
#define DAPPLE_KERNELS_CUDA_LINEAR_INTERNAL_H_

#include <cstdint>

namespace dapple::kernels::cuda::internal {

struct GemmPaths {
  bool fused_bias = true;       // may use CUBLASLT_EPILOGUE_BIAS in LinearForward*
  bool fused_bias_grad = true;  // may use CUBLASLT_EPILOGUE_BGRADB in the weight gradient
  bool lt = true;               // may use cuBLASLt (else cublasGemmEx only)
};
// Applies to later Linear calls of the calling thread.
void SetGemmPathsForTesting(const GemmPaths& paths);

// What the calling thread's Linear calls did so far.
struct GemmPathCounts {
  int64_t fused_bias = 0;          // forwards with the bias in the GEMM epilogue
  int64_t separate_bias = 0;       // forwards with a bias broadcast kernel and beta = 1
  int64_t fused_bias_grad = 0;     // weight gradients with db in the GEMM epilogue
  int64_t separate_bias_grad = 0;  // weight gradients with db by the column-sum kernel
  int64_t lt = 0;                  // GEMMs run by cublasLtMatmul (fused ones included)
  int64_t gemm_ex = 0;             // GEMMs run by cublasGemmEx
};
GemmPathCounts GetGemmPathCounts();

}  // namespace dapple::kernels::cuda::internal

#endif  // DAPPLE_KERNELS_CUDA_LINEAR_INTERNAL_H_
