// ResNet's basic block as one layer (He et al., "Deep Residual Learning for Image Recognition",
// CVPR 2016, Fig. 2 and option B shortcuts; torchvision's BasicBlock; common/model/
// residual_block.cc). On x [N, C, H, W], with O = out_channels and s = stride:
//   z1 = conv1(x)        3x3, stride s, padding 1, no bias        [N, O, H', W']
//   a1 = relu(bn1(z1))
//   z2 = conv2(a1)       3x3, stride 1, padding 1, no bias        [N, O, H', W']
//   sc = x                                    when s = 1 and C = O (identity)
//      = shortcut.bn(zs), zs = shortcut.conv(x)   1x1, stride s, no bias, otherwise
//   y  = relu(bn2(z2) + sc)
// Convolutions on oneDNN (onednn_conv.h), batch normalisations as batchnorm2d.h's
// BatchNormChannels (per micro-batch statistics in training, running statistics in
// evaluation, step statistics of all of them).
#ifndef DAPPLE_KERNELS_CPU_RESIDUAL_BLOCK_H_
#define DAPPLE_KERNELS_CPU_RESIDUAL_BLOCK_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kernels/cpu/batchnorm2d.h"
#include "kernels/cpu/layer.h"
#include "kernels/cpu/onednn_conv.h"

namespace dapple::kernels {

// Parameters, in common/model's order and named "layer<i>.<name>": conv1.weight [O, C, 3, 3],
// bn1.weight [O], bn1.bias [O], conv2.weight [O, O, 3, 3], bn2.weight [O], bn2.bias [O], and
// with a projection shortcut.conv.weight [O, C, 1, 1], shortcut.bn.weight [O],
// shortcut.bn.bias [O]. Buffers: bn1.running_mean, bn1.running_var, bn2.running_mean,
// bn2.running_var[, shortcut.bn.running_mean, shortcut.bn.running_var], each [O]. Step
// statistics: bn1's, bn2's[, shortcut.bn's] (BatchNormChannels layout) one after the other.
//
// cache->saved after a training Forward, indexed by Saved (per sample 3 or 4 O H' W' floats and
// the statistics). cache->grads after BackwardInput, indexed by Grad: the gradients w.r.t. the
// convolutions' outputs (from which BackwardWeight computes only the weight gradients) and the
// batch norms' parameter gradients: Zero Bubble's B / W split (Qi et al., ICLR 2024).
//
// A mismatched x or dy aborts (kernels/cpu/check.h); dx must not alias x, y or dy. One thread
// per layer object.
class ResidualBlockLayer : public Layer {
 public:
  enum Saved {
    kZ1,     // [N, O, H', W'] conv1's output
    kMean1,  // [O] bn1's batch mean and biased variance
    kVar1,
    kA1,  // [N, O, H', W'] relu(bn1(z1)), conv2's input
    kZ2,  // [N, O, H', W'] conv2's output
    kMean2,
    kVar2,
    kZs,  // [N, O, H', W'] shortcut.conv's output (projection only)
    kMeanS,
    kVarS,
    kNumSaved
  };
  enum Grad {
    kGradZ1,  // dL/dz1, dL/dz2, dL/dzs (projection only)
    kGradZ2,
    kGradZs,
    kDGamma1,
    kDBeta1,
    kDGamma2,
    kDBeta2,
    kDGammaS,
    kDBetaS,
    kNumGrads
  };

  // Values start as InitParams would leave the batch norms (weight 1, bias 0) and the
  // convolutions at zero; call InitParams. Requires positive sizes and stride, and 3 <= H + 2,
  // W + 2 (any positive size does).
  ResidualBlockLayer(int layer_index, int64_t channels, int64_t height, int64_t width,
                     int64_t out_channels, int64_t stride, double eps, double momentum);

  // Convolution weights as PyTorch's default (init.h FanInInitBound: U(-b, b), b = 1 /
  // sqrt(fan_in)) from the streams (seed, layer_index, kConv1Weight / kConv2Weight /
  // kShortcutConvWeight); batch norms weight 1, bias 0, running mean 0, running variance 1.
  void InitParams(uint64_t seed);

  std::string Type() const override { return "residual_block"; }
  void Forward(const Tensor& x, Tensor* y, LayerCache* cache, const ForwardContext& ctx) override;
  void BackwardInput(const Tensor& x, const Tensor& y, const Tensor& dy, Tensor* dx,
                     LayerCache* cache) override;
  void BackwardWeight(const Tensor& x, const Tensor& y, const Tensor& dy,
                      LayerCache* cache) override;
  std::vector<Param*> Params() override;
  std::vector<Param*> Buffers() override;
  int64_t StepStatisticsSize() const override;
  void ReadStepStatistics(double* out) const override;
  void ApplyStepStatistics(const double* summed) override;

  bool has_projection() const { return projection_; }
  Param& conv1() { return conv1_; }
  Param& conv2() { return conv2_; }
  Param& shortcut_conv() { return shortcut_conv_; }
  BatchNormChannels& bn1() { return bn1_; }
  BatchNormChannels& bn2() { return bn2_; }
  // Only with a projection.
  BatchNormChannels& shortcut_bn() { return *shortcut_bn_; }

 private:
  // The geometries of a batch of n: conv1, conv2, shortcut.conv.
  ConvGeometry Conv1(int64_t n) const;
  ConvGeometry Conv2(int64_t n) const;
  ConvGeometry Shortcut(int64_t n) const;
  // Rows N of x (aborts unless x is [N, C, H, W] and dy, when given, [N, O, H', W']).
  int64_t Rows(const Tensor& x, const Tensor* dy) const;
  // The batch norms in parameter order.
  std::vector<BatchNormChannels*> Norms() const;

  int layer_index_;
  int64_t channels_, height_, width_, out_channels_, stride_;
  int64_t out_h_, out_w_;
  bool projection_;
  Param conv1_, conv2_, shortcut_conv_;  // shortcut_conv_ empty without a projection
  BatchNormChannels bn1_, bn2_;
  std::unique_ptr<BatchNormChannels> shortcut_bn_;
  Conv2dOp conv1_op_, conv2_op_, shortcut_op_;
  // Scratch within one call (never carried between calls, so micro-batches may interleave).
  Tensor shortcut_out_;  // [N, O, H', W'] shortcut.bn's output
  Tensor grad_sum_;      // [N, O, H', W'] dL/d(bn2(z2) + sc)
  Tensor grad_a1_;       // [N, O, H', W'] dL/da1, then dL/d(bn1 output)
  Tensor grad_x_;        // [N, C, H, W] the shortcut convolution's input gradient
  Tensor dweight_;       // a convolution's weight gradient (oneDNN overwrites)
};

}  // namespace dapple::kernels

#endif  // DAPPLE_KERNELS_CPU_RESIDUAL_BLOCK_H_
