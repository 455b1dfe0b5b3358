// The layer interface every CPU kernel implements.
//
// Layers are stateless between calls apart from their parameters: the caller keeps each
// micro-batch's input x and output y from Forward and hands them back to Backward, so several
// micro-batches can be in flight at once (1F1B). Gradients accumulate into Param::grad until
// the caller zeroes them (once per step, after the optimizer).
//
// Thread safety: one thread per layer object.
#ifndef DAPPLE_KERNELS_CPU_LAYER_H_
#define DAPPLE_KERNELS_CPU_LAYER_H_

#include <string>
#include <vector>

#include "kernels/cpu/tensor.h"

namespace dapple::kernels {

struct Param {
  std::string name;  // "layer1.weight"
  Tensor value;
  Tensor grad;       // same shape as value
};

class Layer {
 public:
  virtual ~Layer() = default;
  // Built-in type name as in the job spec: "linear", "relu", "gelu", "flatten".
  virtual std::string Type() const = 0;
  // x: [N, in...] -> y: [N, out...]. `y` is resized by the layer.
  virtual void Forward(const Tensor& x, Tensor* y) = 0;
  // Given the x and y of a Forward and dL/dy (shape of y): ADDS dL/dparam into each Param::grad
  // and, when `dx` is not null, writes dL/dx (shape of x) into *dx (resized by the layer).
  virtual void Backward(const Tensor& x, const Tensor& y, const Tensor& dy, Tensor* dx) = 0;
  // Parameters owned by this layer (empty for parameter-free layers). Pointers stay valid for
  // the layer's lifetime.
  virtual std::vector<Param*> Params() { return {}; }
};

}  // namespace dapple::kernels

#endif  // DAPPLE_KERNELS_CPU_LAYER_H_
