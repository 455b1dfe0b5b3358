// Linear layer throughput on the GPU against cuBLAS's own GEMMs at the same shapes.
//
// For each dtype (fp32: pure fp32 GEMMs, no TF32; bf16: bf16 inputs, fp32 accumulation) and
// transformer-like shape (n tokens, in, out) it times, with CUDA events on one stream,
//   Linear: LinearForward + LinearBackward with dx (kernels/cuda/linear.h): y = x W^T + b,
//           dW += dy^T x, db += colsum(dy), dx = dy W (the bias and its gradient in the GEMMs'
//           cuBLASLt epilogues where cuBLAS offers them: the last column says which);
//   cuBLAS: the same three products as bare cublasGemmEx calls (beta 0, no bias, no db),
// and prints TFLOP/s for both with FLOPs = 3 * 2 n in out (bias and db not counted) and their
// ratio (Linear / cuBLAS). Each figure is the median of the timed iterations after warm-up.
//
// Usage: linear_cuda_bench [--quick]   (--quick: 1 warm-up and 3 timed iterations, not 2 and 10)
// Exits 0 printing "no GPU: skipped" where no GPU is usable.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/status/status.h"
#include "bench/cuda_bench_util.cuh"
#include "kernels/cuda/context.h"
#include "kernels/cuda/linear.h"
#include "kernels/cuda/linear_internal.h"

namespace dapple::kernels::cuda {
namespace {

using ::dapple::bench::Check;
using ::dapple::bench::Die;
using ::dapple::bench::Fill;
using ::dapple::bench::MedianMs;

template <typename T>
T* Alloc(int64_t count, uint64_t seed, float scale, cudaStream_t stream) {
  T* p = nullptr;
  Check(cudaMalloc(&p, count * sizeof(T)), "cudaMalloc");
  Fill(p, count, seed, -scale, scale, stream);
  return p;
}

struct Shape {
  int64_t n, in, out;
};

template <typename T>
void RunShape(const KernelContext& ctx, const Shape& s, int warmup, int iters) {
  constexpr bool kBf16 = std::is_same_v<T, bf16>;
  constexpr cudaDataType_t kType = kBf16 ? CUDA_R_16BF : CUDA_R_32F;
  const int64_t n = s.n, in = s.in, out = s.out;
  // Magnitudes of a trained layer's activations, weights (1/sqrt(in)) and gradients.
  T* x = Alloc<T>(n * in, 1, 1.0f, ctx.stream);
  T* w = Alloc<T>(out * in, 2, 1.0f / 64, ctx.stream);
  T* dy = Alloc<T>(n * out, 3, 1e-3f, ctx.stream);
  float* b = Alloc<float>(out, 4, 0.1f, ctx.stream);
  // The layer's bf16 copy of the bias (DeviceParam::value_bf16), which a bf16 layer passes.
  T* b16 = Alloc<T>(out, 4, 0.1f, ctx.stream);
  T* y = Alloc<T>(n * out, 5, 0.0f, ctx.stream);
  T* dx = Alloc<T>(n * in, 6, 0.0f, ctx.stream);
  float* dw = Alloc<float>(out * in, 7, 0.0f, ctx.stream);
  float* db = Alloc<float>(out, 8, 0.0f, ctx.stream);

  auto forward = [&] {
    if constexpr (kBf16) {
      Check(LinearForwardBf16(ctx, x, w, b, y, n, in, out, b16), "LinearForwardBf16");
    } else {
      Check(LinearForward(ctx, x, w, b, y, n, in, out), "LinearForward");
    }
  };
  auto backward = [&] {
    if constexpr (kBf16) {
      Check(LinearBackwardBf16(ctx, x, w, dy, dw, db, dx, n, in, out), "LinearBackwardBf16");
    } else {
      Check(LinearBackward(ctx, x, w, dy, dw, db, dx, n, in, out), "LinearBackward");
    }
  };
  const internal::GemmPathCounts before = internal::GetGemmPathCounts();
  const double linear_ms = MedianMs(ctx.stream, warmup, iters, [&] {
    forward();
    backward();
  });
  const internal::GemmPathCounts after = internal::GetGemmPathCounts();
  // Where the time goes: each half alone, and the host's time to enqueue both (when it nears the
  // device time, the GPU waits on the host: launch and cuBLASLt call overhead).
  const double forward_ms = MedianMs(ctx.stream, warmup, iters, forward);
  const double backward_ms = MedianMs(ctx.stream, warmup, iters, backward);
  Check(cudaStreamSynchronize(ctx.stream), "cudaStreamSynchronize");
  const auto host_start = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) {
    forward();
    backward();
  }
  const double host_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - host_start)
          .count() /
      iters;
  Check(cudaStreamSynchronize(ctx.stream), "cudaStreamSynchronize");

  // The same products with cuBLAS directly (column-major view: see kernels/cuda/linear.cu).
  const float one = 1.0f, zero = 0.0f;
  const double gemm_ms = MedianMs(ctx.stream, warmup, iters, [&] {
    Check(cublasGemmEx(ctx.cublas, CUBLAS_OP_T, CUBLAS_OP_N, out, n, in, &one, w, kType, in, x,
                       kType, in, &zero, y, kType, out, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
          "cublasGemmEx y = x W^T");
    Check(cublasGemmEx(ctx.cublas, CUBLAS_OP_N, CUBLAS_OP_T, in, out, n, &one, x, kType, in, dy,
                       kType, out, &zero, dw, CUDA_R_32F, in, CUBLAS_COMPUTE_32F,
                       CUBLAS_GEMM_DEFAULT),
          "cublasGemmEx dW = dy^T x");
    Check(cublasGemmEx(ctx.cublas, CUBLAS_OP_N, CUBLAS_OP_N, in, n, out, &one, w, kType, in, dy,
                       kType, out, &zero, dx, kType, in, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
          "cublasGemmEx dx = dy W");
  });

  const double gemm_forward_ms = MedianMs(ctx.stream, warmup, iters, [&] {
    Check(cublasGemmEx(ctx.cublas, CUBLAS_OP_T, CUBLAS_OP_N, out, n, in, &one, w, kType, in, x,
                       kType, in, &zero, y, kType, out, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
          "cublasGemmEx y = x W^T");
  });

  const double tflop = 3.0 * 2.0 * static_cast<double>(n) * in * out / 1e12;
  const char* bias = after.fused_bias > before.fused_bias         ? "fused"
                     : after.separate_bias > before.separate_bias ? "separate"
                                                                  : "?";
  const char* bias_grad = after.fused_bias_grad > before.fused_bias_grad         ? "fused"
                          : after.separate_bias_grad > before.separate_bias_grad ? "separate"
                                                                                 : "?";
  std::printf("%-5s %6lld %6lld %6lld %10.3f %9.1f %10.3f %9.1f %7.3f  %s / %s\n",
              kBf16 ? "bf16" : "fp32", static_cast<long long>(n), static_cast<long long>(in),
              static_cast<long long>(out), linear_ms, tflop / (linear_ms * 1e-3), gemm_ms,
              tflop / (gemm_ms * 1e-3), gemm_ms / linear_ms, bias, bias_grad);
  std::printf(
      "      parts (ms): forward %.3f (cuBLAS %.3f), backward %.3f (cuBLAS %.3f); host "
      "enqueue of forward + backward %.3f\n",
      forward_ms, gemm_forward_ms, backward_ms, gemm_ms - gemm_forward_ms, host_ms);
  std::fflush(stdout);

  Check(cudaStreamSynchronize(ctx.stream), "cudaStreamSynchronize");
  for (void* p : std::initializer_list<void*>{x, w, dy, b, b16, y, dx, dw, db}) cudaFree(p);
}

int Main(int argc, char** argv) {
  bool quick = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) {
      quick = true;
    } else {
      std::fprintf(stderr, "usage: %s [--quick]\n", argv[0]);
      return 2;
    }
  }
  int devices = 0;  // left untouched when the call fails
  const cudaError_t err = cudaGetDeviceCount(&devices);
  if (err != cudaSuccess || devices == 0) {
    std::printf("no GPU: skipped (%s)\n",
                err != cudaSuccess ? cudaGetErrorString(err) : "0 devices");
    return 0;
  }
  cudaDeviceProp prop;
  Check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  KernelContext ctx;
  Check(cudaStreamCreateWithFlags(&ctx.stream, cudaStreamNonBlocking), "cudaStreamCreate");
  Check(cublasCreate(&ctx.cublas), "cublasCreate");  // default math mode: no TF32
  Check(cublasSetStream(ctx.cublas, ctx.stream), "cublasSetStream");
  ctx.workspace_bytes = size_t{32} << 20;
  Check(cudaMalloc(&ctx.workspace, ctx.workspace_bytes), "cudaMalloc(workspace)");
  Check(cublasSetWorkspace(ctx.cublas, ctx.workspace, ctx.workspace_bytes), "cublasSetWorkspace");
  int cublas_version = 0;
  cublasGetVersion(ctx.cublas, &cublas_version);
  const int warmup = quick ? 1 : 2;
  const int iters = quick ? 3 : 10;
  std::printf("GPU: %s (sm_%d%d, %d SMs), cuBLAS %d\n", prop.name, prop.major, prop.minor,
              prop.multiProcessorCount, cublas_version);
  std::printf(
      "Linear = LinearForward + LinearBackward with dx; cuBLAS = the 3 raw GEMMs "
      "(cublasGemmEx, beta 0, no bias/db);\nFLOPs = 3 * 2 n in out; median of %d after %d "
      "warm-up; ratio = Linear / cuBLAS throughput\n",
      iters, warmup);
  std::printf("%-5s %6s %6s %6s %10s %9s %10s %9s %7s  %s\n", "dtype", "n", "in", "out",
              "Linear ms", "TFLOP/s", "cuBLAS ms", "TFLOP/s", "ratio", "bias / bias gradient");
  const Shape shapes[] = {
      {8192, 4096, 4096}, {8192, 4096, 16384}, {8192, 16384, 4096}, {2048, 1024, 1024}};
  for (const Shape& s : shapes) RunShape<float>(ctx, s, warmup, iters);
  for (const Shape& s : shapes) RunShape<bf16>(ctx, s, warmup, iters);
  cublasDestroy(ctx.cublas);
  cudaFree(ctx.workspace);
  cudaStreamDestroy(ctx.stream);
  return 0;
}

}  // namespace
}  // namespace dapple::kernels::cuda

int main(int argc, char** argv) {
  dapple::bench::BenchName() = "linear_cuda_bench";
  return dapple::kernels::cuda::Main(argc, argv);
}
