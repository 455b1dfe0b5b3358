// The image ops of the CNN layers on oneDNN (Debian libdnnl 2.6): 2-D convolution (forward,
// backward data, backward weights with the bias gradient), max and average pooling (forward,
// backward), and batch normalisation over (N, H, W) per channel (training forward with the
// batch's statistics, inference forward with given statistics, backward). The layers of
// conv2d.h, pool2d.h, global_avgpool.h, batchnorm2d.h and residual_block.h call them.
//
// Layouts: activations NCHW (PyTorch's, [N, C, H, W] row-major), convolution weights OIHW
// ([out_channels, C, k, k]), per-channel vectors [C]; plain row-major fp32 buffers owned by the
// caller, which must not alias unless stated. oneDNN picks its implementation for these plain
// layouts (DNNL_VERBOSE=1 names it), except that the convolutions run in the layouts oneDNN
// chooses (blocked, for its direct JIT kernels), with the caller's buffers reordered into and
// out of scratch buffers of the op around each call.
//
// Each op object creates its primitives on the first call with a given geometry and keeps them
// (the few most recent: onednn_util.h), so steady-state calls only execute; primitives run with
// ComputeThreads() threads (blas.h). Thread safety: one thread per object at a time.
//
// Numerics (fp32, checked against double-precision references in onednn_conv_test.cc): sums
// are float accumulations in oneDNN's order; batch normalisation uses the biased variance of the
// batch, y = (x - mean) / sqrt(var + eps) * gamma + beta (Ioffe & Szegedy, ICML 2015, Alg. 1).
#ifndef DAPPLE_KERNELS_CPU_ONEDNN_CONV_H_
#define DAPPLE_KERNELS_CPU_ONEDNN_CONV_H_

#include <cstdint>
#include <memory>

namespace dapple::kernels {

// floor((in + 2 padding - kernel) / stride) + 1: the positions of a window along one side
// (PyTorch's rule with dilation 1 and ceil_mode false). Requires kernel <= in + 2 padding and
// stride >= 1.
int64_t WindowOutputSize(int64_t in, int64_t kernel, int64_t stride, int64_t padding);

// A square convolution of a batch: x [n, c, h, w] -> y [n, out_channels, OutH(), OutW()] with a
// kernel x kernel window, the same stride and zero padding on both sides (PyTorch's nn.Conv2d,
// dilation 1, groups 1).
struct ConvGeometry {
  int64_t n = 0, c = 0, h = 0, w = 0;
  int64_t out_channels = 0, kernel = 1, stride = 1, padding = 0;

  int64_t OutH() const { return WindowOutputSize(h, kernel, stride, padding); }
  int64_t OutW() const { return WindowOutputSize(w, kernel, stride, padding); }
  bool operator==(const ConvGeometry& o) const {
    return n == o.n && c == o.c && h == o.h && w == o.w && out_channels == o.out_channels &&
           kernel == o.kernel && stride == o.stride && padding == o.padding;
  }
};

class Conv2dOp {
 public:
  Conv2dOp();
  ~Conv2dOp();
  Conv2dOp(const Conv2dOp&) = delete;
  Conv2dOp& operator=(const Conv2dOp&) = delete;

  // y = conv(x, weight) + bias (bias [out_channels], or null for none).
  void Forward(const ConvGeometry& g, const float* x, const float* weight, const float* bias,
               float* y);
  // dx = dL/dx from dy = dL/dy (overwrites dx).
  void BackwardData(const ConvGeometry& g, const float* dy, const float* weight, float* dx);
  // OVERWRITES dweight [out_channels, c, k, k] with dL/dweight and, when dbias is not null,
  // dbias [out_channels] with the sum of dy over (n, OutH, OutW).
  void BackwardWeights(const ConvGeometry& g, const float* x, const float* dy, float* dweight,
                       float* dbias);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Pooling of a batch, each channel on its own: x [n, c, h, w] -> y [n, c, OutH(), OutW()] with a
// kernel_h x kernel_w window, the same stride along both sides and padding on both sides.
struct PoolGeometry {
  int64_t n = 0, c = 0, h = 0, w = 0;
  int64_t kernel_h = 1, kernel_w = 1, stride = 1, padding = 0;

  int64_t OutH() const { return WindowOutputSize(h, kernel_h, stride, padding); }
  int64_t OutW() const { return WindowOutputSize(w, kernel_w, stride, padding); }
  bool operator==(const PoolGeometry& o) const {
    return n == o.n && c == o.c && h == o.h && w == o.w && kernel_h == o.kernel_h &&
           kernel_w == o.kernel_w && stride == o.stride && padding == o.padding;
  }
};

enum class PoolKind {
  // The maximum of the window's input elements (padding never wins: PyTorch's nn.MaxPool2d,
  // whose padding is -inf). The backward routes dy to the window's maximum recorded by the
  // forward in the workspace.
  kMax,
  // The window's sum over kernel_h x kernel_w, padding counted as zeros (nn.AvgPool2d with
  // count_include_pad=True).
  kAverage,
};

class Pool2dOp {
 public:
  explicit Pool2dOp(PoolKind kind);
  ~Pool2dOp();
  Pool2dOp(const Pool2dOp&) = delete;
  Pool2dOp& operator=(const Pool2dOp&) = delete;

  PoolKind kind() const { return kind_; }
  // Bytes of the workspace Forward writes and Backward reads (the position of each window's
  // maximum; oneDNN's format, 1 byte per output element for windows of at most 255 elements);
  // 0 for kAverage.
  int64_t WorkspaceBytes(const PoolGeometry& g);
  // y = pool(x); writes `workspace` (WorkspaceBytes(g) bytes; may be null when that is 0).
  void Forward(const PoolGeometry& g, const float* x, float* y, void* workspace);
  // dx = dL/dx from dy (overwrites dx), with the workspace of the Forward of the same x.
  void Backward(const PoolGeometry& g, const float* dy, const void* workspace, float* dx);

 private:
  PoolKind kind_;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Batch normalisation of x [n, c, hw] (hw = H x W) per channel over its n x hw elements.
class BatchNormOp {
 public:
  BatchNormOp();
  ~BatchNormOp();
  BatchNormOp(const BatchNormOp&) = delete;
  BatchNormOp& operator=(const BatchNormOp&) = delete;

  // Training: y = (x - mean) / sqrt(var + eps) * gamma + beta with the batch's mean [c] and
  // biased variance var [c], which it writes. Requires n * hw >= 1.
  void ForwardTraining(int64_t n, int64_t c, int64_t hw, float eps, const float* x,
                       const float* gamma, const float* beta, float* y, float* mean, float* var);
  // Inference: the same with the given mean [c] and var [c] (running statistics).
  void ForwardInference(int64_t n, int64_t c, int64_t hw, float eps, const float* x,
                        const float* gamma, const float* beta, const float* mean, const float* var,
                        float* y);
  // The exact gradient of ForwardTraining at x (with its mean and var): OVERWRITES dx
  // [n, c, hw], dgamma [c] = sum(dy x_hat) and dbeta [c] = sum(dy), x_hat = (x - mean) rstd,
  //   dx = gamma rstd (dy - mean(dy) - x_hat mean(dy x_hat)),  rstd = 1 / sqrt(var + eps).
  void Backward(int64_t n, int64_t c, int64_t hw, float eps, const float* x, const float* dy,
                const float* mean, const float* var, const float* gamma, float* dx, float* dgamma,
                float* dbeta);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dapple::kernels

#endif  // DAPPLE_KERNELS_CPU_ONEDNN_CONV_H_
