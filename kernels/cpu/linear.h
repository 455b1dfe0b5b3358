// Fully connected layer: y = x W^T + b (torch.nn.Linear).
#ifndef DAPPLE_KERNELS_CPU_LINEAR_H_
#define DAPPLE_KERNELS_CPU_LINEAR_H_

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/cpu/layer.h"

namespace dapple::kernels {

// Parameters: weight [out, in] (row-major, PyTorch's layout, so checkpoints map one to one) and
// bias [out], named "layer<index>.weight" / "layer<index>.bias". Compute goes through OpenBLAS
// sgemm with however many threads the process set (kernels/cpu/blas.h).
//
// Shapes: x [N, in] -> y [N, out]. A mismatched x or dy is a programming error and aborts
// (kernels/cpu/check.h). `dx` must not alias x, y or dy. One thread per layer object.
class LinearLayer : public Layer {
 public:
  // Values and grads start at zero; call InitParams for the model's initial weights.
  // Requires in > 0, out > 0.
  LinearLayer(int layer_index, int64_t in, int64_t out);

  // Sets weight and bias to U(-1/sqrt(in), 1/sqrt(in)) (PyTorch's default for nn.Linear), drawn
  // from the counter-based streams (seed, layer_index, kWeight / kBias) of kernels/cpu/init.h:
  // bitwise the same in every process.
  void InitParams(uint64_t seed);

  std::string Type() const override { return "linear"; }
  // y = x W^T + b (x [N, in], y [N, out]).
  void Forward(const Tensor& x, Tensor* y, LayerCache* cache, const ForwardContext& ctx) override;
  // dx = dy W (when dx is not null).
  void BackwardInput(const Tensor& x, const Tensor& y, const Tensor& dy, Tensor* dx,
                     LayerCache* cache) override;
  // dW += dy^T x; db += sum over rows of dy.
  void BackwardWeight(const Tensor& x, const Tensor& y, const Tensor& dy,
                      LayerCache* cache) override;
  // {weight, bias}.
  std::vector<Param*> Params() override { return {&weight_, &bias_}; }

  int layer_index() const { return layer_index_; }
  int64_t in_features() const { return in_; }
  int64_t out_features() const { return out_; }
  Param& weight() { return weight_; }
  Param& bias() { return bias_; }

 private:
  void CheckBackwardShapes(const Tensor& x, const Tensor& dy) const;

  int layer_index_;
  int64_t in_;
  int64_t out_;
  Param weight_;
  Param bias_;
};

}  // namespace dapple::kernels

#endif  // DAPPLE_KERNELS_CPU_LINEAR_H_
