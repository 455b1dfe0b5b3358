// What the CUDA benchmarks share: fatal checks that name the benchmark, device fills from a
// hash of the index (any size, no host round trip) and the median time of a body on a stream.
// Header-only, for bench/*.cu; each includes it once.
#ifndef DAPPLE_BENCH_CUDA_BENCH_UTIL_CUH_
#define DAPPLE_BENCH_CUDA_BENCH_UTIL_CUH_

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/status/status.h"

namespace dapple::bench {

// The benchmark's name in fatal messages; each benchmark sets it first thing in main.
inline const char*& BenchName() {
  static const char* name = "cuda_bench";
  return name;
}

[[noreturn]] inline void Die(const std::string& what) {
  std::fprintf(stderr, "%s: %s\n", BenchName(), what.c_str());
  std::exit(1);
}
inline void Check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) Die(std::string(what) + ": " + cudaGetErrorString(err));
}
inline void Check(cublasStatus_t err, const char* what) {
  if (err != CUBLAS_STATUS_SUCCESS) Die(std::string(what) + ": " + cublasGetStatusString(err));
}
inline void Check(const absl::Status& s, const char* what) {
  if (!s.ok()) Die(std::string(what) + ": " + s.ToString());
}

// Uniform values in [lo, hi) from a SplitMix64 hash of (seed, index).
template <typename T>
__global__ void FillKernel(T* p, int64_t count, uint64_t seed, float lo, float hi) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += stride) {
    uint64_t z = seed + static_cast<uint64_t>(i) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    const float v = lo + (hi - lo) * (static_cast<float>(z >> 40) * (1.0f / 16777216.0f));
    if constexpr (std::is_same_v<T, float>) {
      p[i] = v;
    } else {
      p[i] = __float2bfloat16_rn(v);
    }
  }
}

// Fills `count` elements at `p` on `stream` (FillKernel); dies on a launch error.
template <typename T>
void Fill(T* p, int64_t count, uint64_t seed, float lo, float hi, cudaStream_t stream) {
  FillKernel<T><<<4096, 256, 0, stream>>>(p, count, seed, lo, hi);
  Check(cudaGetLastError(), "fill kernel");
}

// Median milliseconds of `iters` runs of `body` on `stream` (CUDA events between runs) after
// `warmup` untimed ones.
inline double MedianMs(cudaStream_t stream, int warmup, int iters,
                       const std::function<void()>& body) {
  for (int i = 0; i < warmup; ++i) body();
  std::vector<cudaEvent_t> events(iters + 1);
  for (cudaEvent_t& e : events) Check(cudaEventCreate(&e), "cudaEventCreate");
  Check(cudaEventRecord(events[0], stream), "cudaEventRecord");
  for (int i = 0; i < iters; ++i) {
    body();
    Check(cudaEventRecord(events[i + 1], stream), "cudaEventRecord");
  }
  Check(cudaEventSynchronize(events[iters]), "cudaEventSynchronize");
  std::vector<double> ms(iters);
  for (int i = 0; i < iters; ++i) {
    float t = 0;
    Check(cudaEventElapsedTime(&t, events[i], events[i + 1]), "cudaEventElapsedTime");
    ms[i] = t;
  }
  for (cudaEvent_t e : events) cudaEventDestroy(e);
  std::sort(ms.begin(), ms.end());
  return iters % 2 == 1 ? ms[iters / 2] : 0.5 * (ms[iters / 2 - 1] + ms[iters / 2]);
}

}  // namespace dapple::bench

#endif  // DAPPLE_BENCH_CUDA_BENCH_UTIL_CUH_
