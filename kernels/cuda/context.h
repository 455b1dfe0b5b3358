// What every CUDA kernel of dapple runs on: one stream and the cuBLAS and cuDNN handles bound to
// it.
//
// Every function of kernels/cuda is stream-ordered: it only enqueues work on ctx.stream and
// returns without synchronising (no host-visible result until the caller synchronises the
// stream). Pointers are device memory unless a parameter says otherwise. A launch or cuBLAS
// error is returned at once (kInternal, naming the op); errors of the work itself surface at the
// next synchronisation (cuda_status.h). Thread safety: one thread per stream and handle.
#ifndef DAPPLE_KERNELS_CUDA_CONTEXT_H_
#define DAPPLE_KERNELS_CUDA_CONTEXT_H_

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <cudnn.h>

namespace dapple::kernels::cuda {

struct KernelContext {
  cudaStream_t stream = nullptr;
  cublasHandle_t cublas = nullptr;  // cublasSetStream(cublas, stream) already done by the owner
  cudnnHandle_t cudnn = nullptr;    // cudnnSetStream(cudnn, stream) already done; the image ops'
  // Optional cuBLAS workspace (device memory) for cublasLt-based GEMMs; may be null.
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
};

using bf16 = __nv_bfloat16;

}  // namespace dapple::kernels::cuda

#endif  // DAPPLE_KERNELS_CUDA_CONTEXT_H_
