// Test-only helpers for kernels/cuda: GPU detection (tests GTEST_SKIP without one), a shared
// KernelContext, device arrays poisoned with NaN, random inputs, bf16 rounding and a
// per-element comparison that prints what differed.
//
// Tolerances are stated per element as |got - want| <= rtol * scale, where `scale` is the sum of
// the absolute values of the terms the exact result is made of (for a GEMM output
// sum_k |a_k b_k| plus the absolute value of what it is added to: bias or the accumulated
// gradient). Two correct fp32 evaluations that differ only in summation order and library math
// (erff, expf) differ by a small multiple of 2^-24 * scale whatever the cancellation: the
// rounding errors of a K-term sum are bounded by K * 2^-24 * scale and in practice grow like
// sqrt(K) (about 32 * 2^-24 at K = 1024, against 1e-5 = 168 * 2^-24). Any wrong index,
// transpose, missing term or unwritten (NaN-poisoned) element misses by O(scale).
#ifndef DAPPLE_KERNELS_CUDA_TESTING_H_
#define DAPPLE_KERNELS_CUDA_TESTING_H_

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "gtest/gtest.h"
#include "kernels/cuda/context.h"

namespace dapple::kernels::cuda::testing {

// fp32 results: 1e-5 relative to the scale above. bf16: 1e-2 (bf16 keeps 8 significant bits,
// a rounding is at most 2^-9 = 0.2% relative), against the CPU reference run on the
// bf16-rounded inputs.
constexpr double kFp32Rtol = 1e-5;
constexpr double kBf16Rtol = 1e-2;

// Empty when a GPU is usable; otherwise why not (cached: asked once per process).
inline const std::string& NoGpuReason() {
  static const std::string* reason = [] {
    int count = 0;  // left untouched when the call fails
    const cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess) {
      cudaGetLastError();
      return new std::string(absl::StrCat("no usable GPU: cudaGetDeviceCount failed with ",
                                          cudaGetErrorName(err), " (", cudaGetErrorString(err),
                                          ")"));
    }
    if (count == 0) return new std::string("no GPU: cudaGetDeviceCount returned 0 devices");
    return new std::string();
  }();
  return *reason;
}

#define DAPPLE_SKIP_WITHOUT_GPU()                                      \
  do {                                                                 \
    if (!::dapple::kernels::cuda::testing::NoGpuReason().empty()) {    \
      GTEST_SKIP() << ::dapple::kernels::cuda::testing::NoGpuReason(); \
    }                                                                  \
  } while (0)

// Test setup failures (cudaMalloc, cublasCreate on a machine that has a GPU) end the test binary
// with the call named: nothing meaningful can be checked after them.
inline void CheckCuda(cudaError_t err, const char* what) {
  if (err != cudaSuccess) {
    std::fprintf(stderr, "%s failed: %s\n", what, cudaGetErrorString(err));
    std::abort();
  }
}

constexpr size_t kWorkspaceBytes = size_t{32} << 20;

// One stream, cuBLAS (default math: no TF32) and cuDNN handles bound to it and a 32 MiB workspace,
// as worker/device sets them up; created on first use and kept for the whole process.
inline const KernelContext& Context() {
  static const KernelContext* ctx = [] {
    auto* c = new KernelContext;
    CheckCuda(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking), "cudaStreamCreate");
    if (cublasCreate(&c->cublas) != CUBLAS_STATUS_SUCCESS ||
        cublasSetStream(c->cublas, c->stream) != CUBLAS_STATUS_SUCCESS) {
      std::fprintf(stderr, "cublasCreate / cublasSetStream failed\n");
      std::abort();
    }
    if (cudnnCreate(&c->cudnn) != CUDNN_STATUS_SUCCESS ||
        cudnnSetStream(c->cudnn, c->stream) != CUDNN_STATUS_SUCCESS) {
      std::fprintf(stderr, "cudnnCreate / cudnnSetStream failed\n");
      std::abort();
    }
    CheckCuda(cudaMalloc(&c->workspace, kWorkspaceBytes), "cudaMalloc(workspace)");
    c->workspace_bytes = kWorkspaceBytes;
    if (cublasSetWorkspace(c->cublas, c->workspace, c->workspace_bytes) != CUBLAS_STATUS_SUCCESS) {
      std::fprintf(stderr, "cublasSetWorkspace failed\n");
      std::abort();
    }
    return c;
  }();
  return *ctx;
}

inline void Sync() { CheckCuda(cudaStreamSynchronize(Context().stream), "cudaStreamSynchronize"); }

// Device memory for `count` elements, every byte 0xFF on creation (NaN for float, double and
// bf16; -1 for int32), so an element a kernel forgot to write cannot pass a comparison.
template <typename T>
class DeviceArray {
 public:
  explicit DeviceArray(size_t count) : count_(count) {
    if (count_ == 0) return;
    CheckCuda(cudaMalloc(&ptr_, count_ * sizeof(T)), "cudaMalloc");
    CheckCuda(cudaMemsetAsync(ptr_, 0xFF, count_ * sizeof(T), Context().stream), "cudaMemset");
  }
  explicit DeviceArray(const std::vector<T>& host) : DeviceArray(host.size()) { Upload(host); }
  ~DeviceArray() { cudaFree(ptr_); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;

  T* get() const { return ptr_; }
  size_t size() const { return count_; }
  void Upload(const std::vector<T>& host) {
    CheckCuda(host.size() == count_ ? cudaSuccess : cudaErrorInvalidValue, "Upload size");
    if (count_ == 0) return;
    CheckCuda(cudaMemcpyAsync(ptr_, host.data(), count_ * sizeof(T), cudaMemcpyHostToDevice,
                              Context().stream),
              "cudaMemcpy to device");
    Sync();
  }
  // Waits for the stream, then copies back.
  std::vector<T> Download() const {
    std::vector<T> host(count_);
    if (count_ == 0) return host;
    CheckCuda(cudaMemcpyAsync(host.data(), ptr_, count_ * sizeof(T), cudaMemcpyDeviceToHost,
                              Context().stream),
              "cudaMemcpy to host");
    Sync();
    return host;
  }

 private:
  size_t count_;
  T* ptr_ = nullptr;
};

// Uniform in [lo, hi), a pure function of `seed`.
inline std::vector<float> Uniform(size_t count, uint64_t seed, float lo, float hi) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(count);
  for (float& x : v) x = dist(rng);
  return v;
}

inline std::vector<bf16> ToBf16(const std::vector<float>& v) {
  std::vector<bf16> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = __float2bfloat16_rn(v[i]);
  return out;
}
inline std::vector<float> ToFloat(const std::vector<bf16>& v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = __bfloat162float(v[i]);
  return out;
}
// The nearest bf16 (round to nearest even), as a float.
inline std::vector<float> RoundToBf16(const std::vector<float>& v) { return ToFloat(ToBf16(v)); }

// Host values of element type T (float or bf16) from floats, and back: what a typed test uploads
// and reads back.
template <typename T>
std::vector<T> ToDevice(const std::vector<float>& v) {
  if constexpr (std::is_same_v<T, float>) {
    return v;
  } else {
    return ToBf16(v);
  }
}
template <typename T>
std::vector<float> FromDevice(const std::vector<T>& v) {
  if constexpr (std::is_same_v<T, float>) {
    return v;
  } else {
    return ToFloat(v);
  }
}

inline std::vector<float> Abs(const std::vector<float>& v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = std::fabs(v[i]);
  return out;
}

// Every element: |got - want| <= rtol * scale (NaN anywhere fails, unless `nan_equal` and both
// are NaN). `cols` > 0 prints indices as [row, col]. Reports the first 10 misses and the count.
template <typename G, typename W, typename S>
void ExpectClose(const std::string& what, const std::vector<G>& got, const std::vector<W>& want,
                 const std::vector<S>& scale, double rtol, int64_t cols = 0,
                 bool nan_equal = false) {
  ASSERT_EQ(got.size(), want.size()) << what;
  ASSERT_EQ(scale.size(), want.size()) << what;
  int64_t misses = 0;
  std::string report;
  for (size_t i = 0; i < want.size(); ++i) {
    const double g = static_cast<double>(got[i]);
    const double w = static_cast<double>(want[i]);
    if (nan_equal && std::isnan(g) && std::isnan(w)) continue;
    const double bound = rtol * std::fabs(static_cast<double>(scale[i]));
    if (std::fabs(g - w) <= bound) continue;  // false for NaN
    if (++misses <= 10) {
      const std::string index =
          cols > 0 ? absl::StrCat("[", i / cols, ", ", i % cols, "]") : absl::StrCat("[", i, "]");
      absl::StrAppend(&report, "\n  ", what, index, ": got ", absl::StrFormat("%.9g", g),
                      ", expected ", absl::StrFormat("%.9g", w), ", |diff| ",
                      absl::StrFormat("%.3g", std::fabs(g - w)), " > bound ",
                      absl::StrFormat("%.3g", bound));
    }
  }
  EXPECT_EQ(misses, 0) << what << ": " << misses << " of " << want.size()
                       << " elements outside the tolerance (rtol " << rtol << ")" << report;
}

}  // namespace dapple::kernels::cuda::testing

#endif  // DAPPLE_KERNELS_CUDA_TESTING_H_
