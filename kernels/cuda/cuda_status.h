// CUDA runtime and cuBLAS errors as absl::Status, so every fallible GPU call reaches the caller
// as a one-line message naming the call ("cudaMalloc(1073741824 bytes): out of memory").
//
// Codes: cudaErrorMemoryAllocation -> kResourceExhausted; cudaErrorNoDevice,
// cudaErrorInsufficientDriver and other "no usable GPU" errors -> kUnavailable; every other
// failure -> kInternal. Thread safety: pure functions.
#ifndef DAPPLE_KERNELS_CUDA_CUDA_STATUS_H_
#define DAPPLE_KERNELS_CUDA_CUDA_STATUS_H_

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace dapple::kernels::cuda {

// OkStatus when `err` is cudaSuccess; otherwise "<what>: <cudaGetErrorString(err)>".
absl::Status CudaStatus(cudaError_t err, absl::string_view what);
absl::Status CublasStatus(cublasStatus_t err, absl::string_view what);

}  // namespace dapple::kernels::cuda

#define DAPPLE_CUDA_RETURN_IF_ERROR(expr)                                                    \
  do {                                                                                       \
    const absl::Status _dapple_cuda_st = ::dapple::kernels::cuda::CudaStatus((expr), #expr); \
    if (!_dapple_cuda_st.ok()) return _dapple_cuda_st;                                       \
  } while (0)

#define DAPPLE_CUBLAS_RETURN_IF_ERROR(expr)                                                    \
  do {                                                                                         \
    const absl::Status _dapple_blas_st = ::dapple::kernels::cuda::CublasStatus((expr), #expr); \
    if (!_dapple_blas_st.ok()) return _dapple_blas_st;                                         \
  } while (0)

#endif  // DAPPLE_KERNELS_CUDA_CUDA_STATUS_H_
