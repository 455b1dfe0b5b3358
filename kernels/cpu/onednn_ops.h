// The element-wise and normalisation steps of the GPT layers on oneDNN (Intel's oneAPI Deep
// Neural Network Library, Debian libdnnl 2.6): exact GELU, softmax over rows, and LayerNorm.
// Chosen over plain loops by measurement at the example shapes (docs/benchmarks.md, "GPT layer
// ops": 4x to 40x faster, bench/gpt_ops_bench.cc); the GEMMs stay on OpenBLAS (dense.h).
//
// Each op object creates its primitives on the first call with a given shape and keeps them
// (the few most recent shapes), so steady-state calls only execute. Primitives are created
// and executed with ComputeThreads() OpenMP threads (blas.h), set on the calling thread before
// each call: a primitive keeps the thread count it was created with, and threads that did not
// set theirs would use every core.
//
// Numerics (fp32 throughout; checked against double-precision references in
// onednn_ops_test.cc): GELU within 4e-7 absolute of 0.5 x (1 + erf(x / sqrt 2)) (oneDNN's
// polynomial erf; the float libm erff is as far off); softmax subtracts the row maximum, and an
// element of -inf becomes exactly 0; LayerNorm takes the biased variance by two passes in float.
//
// Buffers: contiguous row-major fp32 of the stated shapes, owned by the caller. In-place use is
// allowed where stated. Thread safety: one thread per object at a time.
#ifndef DAPPLE_KERNELS_CPU_ONEDNN_OPS_H_
#define DAPPLE_KERNELS_CPU_ONEDNN_OPS_H_

#include <cstdint>
#include <memory>

namespace dapple::kernels {

// Exact GELU (Hendrycks & Gimpel, arXiv 1606.08415; PyTorch's nn.GELU()): y = x Phi(x).
class GeluOp {
 public:
  GeluOp();
  ~GeluOp();
  GeluOp(const GeluOp&) = delete;
  GeluOp& operator=(const GeluOp&) = delete;

  // y[i] = x[i] Phi(x[i]) for i < n; y may equal x.
  void Forward(const float* x, float* y, int64_t n);
  // dx[i] = dy[i] (Phi(x[i]) + x[i] phi(x[i])) for i < n; dx may equal dy.
  void Backward(const float* x, const float* dy, float* dx, int64_t n);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Softmax over each row of a [rows, cols] matrix.
class SoftmaxOp {
 public:
  SoftmaxOp();
  ~SoftmaxOp();
  SoftmaxOp(const SoftmaxOp&) = delete;
  SoftmaxOp& operator=(const SoftmaxOp&) = delete;

  // In place: s[r, :] = softmax(s[r, :]). A row needs at least one finite element.
  void Forward(float* s, int64_t rows, int64_t cols);
  // ds = p * (dp - sum_j(p dp)) per row, from the forward's output p; ds may equal dp.
  void Backward(const float* p, const float* dp, float* ds, int64_t rows, int64_t cols);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Layer normalisation of each row of a [rows, cols] matrix (Ba et al., arXiv 1607.06450;
// PyTorch's nn.LayerNorm(cols, eps)).
class LayerNormOp {
 public:
  LayerNormOp();
  ~LayerNormOp();
  LayerNormOp(const LayerNormOp&) = delete;
  LayerNormOp& operator=(const LayerNormOp&) = delete;

  // y = (x - mean) / sqrt(var + eps) * gamma + beta per row, gamma and beta [cols]; writes
  // mean[rows] and the biased variance var[rows]. y must not alias x.
  void Forward(const float* x, const float* gamma, const float* beta, int64_t rows, int64_t cols,
               float eps, float* y, float* mean, float* var);
  // The input gradient of the normalisation WITHOUT the scale: for g = dL/d(x_hat),
  // dx = rstd (g - mean(g) - x_hat mean(g x_hat)) per row, x_hat = (x - mean) rstd,
  // rstd = 1 / sqrt(var + eps). (With a scale gamma, pass g = dL/dy * gamma.) dx may equal g.
  void BackwardData(const float* x, const float* g, const float* mean, const float* var,
                    int64_t rows, int64_t cols, float eps, float* dx);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dapple::kernels

#endif  // DAPPLE_KERNELS_CPU_ONEDNN_OPS_H_
