// 2-D convolution over a [C, H, W] input with square kernels: PyTorch's nn.Conv2d(C,
// out_channels, kernel, stride, padding, bias) with dilation 1 and groups 1
// (common/model/conv2d.cc), on oneDNN (onednn_conv.h).
#ifndef DAPPLE_KERNELS_CPU_CONV2D_H_
#define DAPPLE_KERNELS_CPU_CONV2D_H_

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/cpu/layer.h"
#include "kernels/cpu/onednn_conv.h"

namespace dapple::kernels {

// Parameters, in common/model's order: "layer<i>.weight" [out_channels, C, k, k] (OIHW,
// PyTorch's layout) and, with bias, "layer<i>.bias" [out_channels]. Nothing saved beyond x;
// BackwardWeight recomputes nothing but the weight gradient (oneDNN's backward-weights
// primitive on x and dy, which also gives the bias gradient).
//
// Shapes: x [N, C, H, W] -> y [N, out_channels, H', W'] (onednn_conv.h WindowOutputSize). A
// mismatched x or dy aborts (kernels/cpu/check.h). dx must not alias x, y or dy. One thread per
// layer object.
class Conv2dLayer : public Layer {
 public:
  // Values and grads start at zero; call InitParams. Requires positive sizes, stride >= 1,
  // padding >= 0 and kernel <= H + 2 padding, W + 2 padding.
  Conv2dLayer(int layer_index, int64_t channels, int64_t height, int64_t width,
              int64_t out_channels, int64_t kernel, int64_t stride, int64_t padding, bool bias);

  // PyTorch's default (kaiming_uniform_ with a = sqrt(5), init.h FanInInitBound): weight and
  // bias U(-b, b), b = 1 / sqrt(C k^2), from the streams (seed, layer_index, kWeight / kBias).
  void InitParams(uint64_t seed);

  std::string Type() const override { return "conv2d"; }
  void Forward(const Tensor& x, Tensor* y, LayerCache* cache, const ForwardContext& ctx) override;
  // dx = the transposed convolution of dy (when dx is not null).
  void BackwardInput(const Tensor& x, const Tensor& y, const Tensor& dy, Tensor* dx,
                     LayerCache* cache) override;
  // dW += dL/dW from x and dy; db += sum of dy over (N, H', W').
  void BackwardWeight(const Tensor& x, const Tensor& y, const Tensor& dy,
                      LayerCache* cache) override;
  // {weight} or {weight, bias}.
  std::vector<Param*> Params() override;

  Param& weight() { return weight_; }
  Param& bias() { return bias_; }
  // The geometry of a batch of n (onednn_conv.h).
  ConvGeometry Geometry(int64_t n) const;

 private:
  // Rows N of x (aborts unless x is [N, C, H, W] and dy, when given, is [N, out, H', W']).
  int64_t Rows(const Tensor& x, const Tensor* dy) const;

  int layer_index_;
  ConvGeometry shape_;  // n unused
  bool has_bias_;
  Param weight_;
  Param bias_;  // empty without bias
  Conv2dOp op_;
  Tensor dweight_, dbias_;  // scratch: oneDNN overwrites, Param::grad accumulates
};

// grad[i] += delta[i] for every element (the accumulation of a gradient oneDNN overwrote).
void AddInto(const Tensor& delta, Tensor* grad);

}  // namespace dapple::kernels

#endif  // DAPPLE_KERNELS_CPU_CONV2D_H_
