// Layer normalisation over the last dimension with a learned scale and shift (Ba et al., arXiv
// 1607.06450): PyTorch's nn.LayerNorm(C, eps) (common/model/layernorm.cc).
#ifndef DAPPLE_KERNELS_CPU_LAYERNORM_H_
#define DAPPLE_KERNELS_CPU_LAYERNORM_H_

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/cpu/layer.h"
#include "kernels/cpu/onednn_ops.h"

namespace dapple::kernels {

// eps when the spec leaves it out (PyTorch's default), and the transformer block's.
constexpr double kDefaultLayerNormEps = 1e-5;

// LayerNorm of the rows of a [rows, C] matrix, split for a backward in two parts (layer.h):
// the computation shared by LayerNormLayer and TransformerBlockLayer. Per row,
//   y = (x - mean) * rstd * gamma + beta,  rstd = 1 / sqrt(var + eps),
// var the biased variance. The normalisation and its input gradient run on oneDNN
// (onednn_ops.h); the parameter gradients are sums over rows in double. Buffers are row-major
// fp32 owned by the caller. One thread per object.
class LayerNormRows {
 public:
  // Requires cols > 0, eps > 0.
  LayerNormRows(int64_t cols, float eps);

  // Writes y [rows, C], mean [rows] and var [rows] (what the backward needs besides x).
  void Forward(const float* x, int64_t rows, const float* gamma, const float* beta, float* y,
               float* mean, float* var);
  // dx = dL/dx from dy = dL/dy; overwrites dx, or adds to it when `accumulate` (a residual
  // branch's gradient already there). dx must not alias the inputs.
  void BackwardInput(const float* x, const float* dy, int64_t rows, const float* mean,
                     const float* var, const float* gamma, bool accumulate, float* dx);
  // dgamma += sum over rows of dy * (x - mean) * rstd; dbeta += sum over rows of dy.
  void BackwardWeight(const float* x, const float* dy, int64_t rows, const float* mean,
                      const float* var, float* dgamma, float* dbeta);

  int64_t cols() const { return cols_; }
  float eps() const { return eps_; }

 private:
  int64_t cols_;
  float eps_;
  LayerNormOp op_;
  std::vector<float> scratch_;  // [rows, C]: dy * gamma, then its input gradient
  std::vector<double> sums_;    // [2C]: the parameter gradients' row sums
};

// The layernorm layer: x [N, ..., C] -> y of the same shape, normalising each of the
// N * (numel / N / C) rows of C. Parameters, in common/model's order: weight [C] (gamma, starts
// at 1) and bias [C] (beta, starts at 0), "layer<index>.weight" / ".bias". Saved in
// cache->saved: the mean and the biased variance of each row ([rows] each; oneDNN's backward
// takes the variance). BackwardInput writes dx; BackwardWeight adds dgamma and dbeta from x, dy
// and the saved statistics. A mismatched x or dy aborts (kernels/cpu/check.h); dx must not
// alias x, y or dy. One thread per layer object.
class LayerNormLayer : public Layer {
 public:
  // Requires width > 0, eps in (0, 1).
  LayerNormLayer(int layer_index, int64_t width, double eps);

  std::string Type() const override { return "layernorm"; }
  void Forward(const Tensor& x, Tensor* y, LayerCache* cache, const ForwardContext& ctx) override;
  void BackwardInput(const Tensor& x, const Tensor& y, const Tensor& dy, Tensor* dx,
                     LayerCache* cache) override;
  void BackwardWeight(const Tensor& x, const Tensor& y, const Tensor& dy,
                      LayerCache* cache) override;
  // {weight, bias}.
  std::vector<Param*> Params() override { return {&weight_, &bias_}; }

  Param& weight() { return weight_; }
  Param& bias() { return bias_; }

 private:
  // Rows of x (aborts unless x is [N, ..., C] and dy, when given, has x's shape).
  int64_t Rows(const Tensor& x, const Tensor* dy) const;

  int layer_index_;
  LayerNormRows norm_;
  Param weight_;
  Param bias_;
};

}  // namespace dapple::kernels

#endif  // DAPPLE_KERNELS_CPU_LAYERNORM_H_
