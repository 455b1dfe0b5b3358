// Parameter-free layers: element-wise activations and Flatten.
//
// Shapes: any [N, ...]; y has x's shape (Flatten: [N, prod(...)]). A dy whose shape differs from
// y's is a programming error and aborts (kernels/cpu/check.h). `dx` must not alias x or y; it may
// alias dy for ReLU and GELU (element-wise). One thread per layer object.
#ifndef DAPPLE_KERNELS_CPU_ACTIVATIONS_H_
#define DAPPLE_KERNELS_CPU_ACTIVATIONS_H_

#include <string>

#include "kernels/cpu/layer.h"
#include "kernels/cpu/onednn_ops.h"

namespace dapple::kernels {

// y = max(x, 0). Backward: dx = dy where x > 0, else 0 (the subgradient 0 at x == 0, as
// PyTorch).
class ReluLayer : public Layer {
 public:
  std::string Type() const override { return "relu"; }
  void Forward(const Tensor& x, Tensor* y, LayerCache* cache, const ForwardContext& ctx) override;
  void BackwardInput(const Tensor& x, const Tensor& y, const Tensor& dy, Tensor* dx,
                     LayerCache* cache) override;
};

// Exact GELU (Hendrycks & Gimpel, arXiv 1606.08415), PyTorch's default nn.GELU
// (approximate='none'): y = x * Phi(x) = 0.5 x (1 + erf(x / sqrt(2))).
// Backward: dx = dy * (Phi(x) + x * phi(x)), phi the standard normal density. Computed by
// GeluOp (onednn_ops.h), as the transformer block's GELU.
class GeluLayer : public Layer {
 public:
  std::string Type() const override { return "gelu"; }
  void Forward(const Tensor& x, Tensor* y, LayerCache* cache, const ForwardContext& ctx) override;
  void BackwardInput(const Tensor& x, const Tensor& y, const Tensor& dy, Tensor* dx,
                     LayerCache* cache) override;

 private:
  GeluOp op_;
};

// [N, d1, d2, ...] -> [N, d1 * d2 * ...] (a copy in the same row-major order).
// Backward: dx = dy reshaped to x's shape.
class FlattenLayer : public Layer {
 public:
  std::string Type() const override { return "flatten"; }
  void Forward(const Tensor& x, Tensor* y, LayerCache* cache, const ForwardContext& ctx) override;
  void BackwardInput(const Tensor& x, const Tensor& y, const Tensor& dy, Tensor* dx,
                     LayerCache* cache) override;
};

}  // namespace dapple::kernels

#endif  // DAPPLE_KERNELS_CPU_ACTIVATIONS_H_
