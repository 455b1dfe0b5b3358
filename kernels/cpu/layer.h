// The layer interface every CPU kernel implements (one class per layer type; the factory in
// kernels/cpu/layer_factory.h builds them from the types of common/model).
//
// Layers keep nothing per micro-batch themselves: the caller keeps each micro-batch's input x,
// output y and LayerCache from Forward and hands them back to the backward, so several
// micro-batches can be in flight at once (1F1B). The backward comes in two parts that may run
// apart (Zero Bubble, Qi et al., ICLR 2024: B and W): BackwardInput computes dL/dx and keeps in
// the cache what the weight gradient needs; BackwardWeight adds dL/dparam. Gradients accumulate
// into Param::grad until the caller zeroes them (once per step, after the optimizer).
//
// Tensors are row-major fp32 with the batch (rows) first: x [N, input_shape...],
// y [N, output_shape...] (common/model LayerInfo shapes). Token ids (an embedding's input) are
// held as exact float values (ids < 2^24).
//
// Thread safety: one thread per layer object.
#ifndef DAPPLE_KERNELS_CPU_LAYER_H_
#define DAPPLE_KERNELS_CPU_LAYER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/cpu/tensor.h"

namespace dapple::kernels {

struct Param {
  std::string name;  // "layer1.weight" (common/model ParamName)
  Tensor value;
  Tensor grad;  // same shape as value
  // A tied copy (common/model ParamInfo::tied_to): the name of the parameter it copies. Its
  // value starts equal to that one's and its gradient is summed with that one's before every
  // update; empty for a parameter of its own.
  std::string tied_to;
};

// What a forward depends on besides its input and parameters: dropout's masks are a pure
// function of (seed, step, sample, layer, element), so that training does not change with the
// pipeline layout (P, D, M).
struct ForwardContext {
  bool training = false;     // false: evaluation (dropout is the identity)
  uint64_t seed = 0;         // training.seed
  int64_t step = 0;          // the global step (0-based) the micro-batch belongs to
  int64_t first_sample = 0;  // row 0's position in that step's global batch
  // Activation recomputation (worker/runtime/layer_recompute.h): this Forward repeats a
  // training Forward already run with the same other fields, to rebuild what the backward
  // needs. It computes the same output and cache (dropout's masks depend on the fields above
  // only) but adds nothing to the step statistics, which the first Forward already counted.
  bool recompute = false;
};

// Per micro-batch state a layer keeps from its Forward for its backward, and from
// BackwardInput for BackwardWeight, beyond x, y and dy. Owned by the caller (one per layer and
// in-flight micro-batch), reused across micro-batches: layers resize what they use.
struct LayerCache {
  ForwardContext ctx;         // of the Forward that filled it
  std::vector<Tensor> saved;  // layer-defined (common/model LayerInfo::saved_bytes counts them)
  std::vector<Tensor> grads;  // layer-defined, from BackwardInput for BackwardWeight
};

class Layer {
 public:
  virtual ~Layer() = default;
  // The type name as in the job spec: "linear", "transformer_block".
  virtual std::string Type() const = 0;
  // x: [N, in...] -> y: [N, out...] (resized by the layer). Stores ctx and what its backward
  // needs in `cache`.
  virtual void Forward(const Tensor& x, Tensor* y, LayerCache* cache,
                       const ForwardContext& ctx) = 0;
  // Given the x, y and cache of a Forward and dL/dy (shape of y): writes dL/dx (shape of x,
  // resized) into *dx when `dx` is not null, and keeps in `cache` what BackwardWeight needs.
  // Changes no parameter gradient.
  virtual void BackwardInput(const Tensor& x, const Tensor& y, const Tensor& dy, Tensor* dx,
                             LayerCache* cache) = 0;
  // ADDS dL/dparam into each Param::grad. Called after the BackwardInput of the same
  // micro-batch with the same x, y, dy and cache, possibly after calls for other micro-batches
  // in between. The default (layers without parameters) does nothing.
  virtual void BackwardWeight(const Tensor& x, const Tensor& y, const Tensor& dy,
                              LayerCache* cache) {
    (void)x, (void)y, (void)dy, (void)cache;
  }
  // BackwardInput then BackwardWeight.
  void Backward(const Tensor& x, const Tensor& y, const Tensor& dy, Tensor* dx, LayerCache* cache) {
    BackwardInput(x, y, dy, dx, cache);
    BackwardWeight(x, y, dy, cache);
  }
  // Parameters used by this layer (empty for parameter-free layers), in common/model's
  // ParamInfo order. Pointers stay valid for the layer's lifetime.
  virtual std::vector<Param*> Params() { return {}; }
  // Non-trainable state kept and checkpointed with the parameters (batch norm's running
  // statistics), in common/model's order, named like parameters ("layer3.running_mean"). Each
  // is a Param whose `grad` is empty: no optimizer, clipping or gradient exchange touches them;
  // only ApplyStepStatistics (and a checkpoint restore) changes them. Pointers stay valid for
  // the layer's lifetime. Empty for layers without state.
  virtual std::vector<Param*> Buffers() { return {}; }

  // Step statistics: what training Forwards accumulate over one step's micro-batches for a
  // once-per-step update of Buffers() (batch norm: per channel the sum and the sum of squares of
  // its input and the element count; docs/layers.md, "Batch normalisation"). The runtime, after
  // a step's last training Forward and before the next step's first:
  //   1. ReadStepStatistics into StepStatisticsSize() doubles on every replica of the stage,
  //   2. sums them element-wise over the stage's replicas (they are sums, so the result is the
  //      statistics of the step's whole batch, whatever P, D and M are),
  //   3. calls ApplyStepStatistics with that sum on every replica (identical buffers
  //      everywhere), which updates the buffers and clears the accumulation.
  // Evaluation Forwards (ctx.training false) accumulate nothing. Size 0 (the default): the layer
  // has none, and the calls do nothing. A recomputing Forward (ForwardContext::recompute)
  // accumulates nothing either.
  virtual int64_t StepStatisticsSize() const { return 0; }
  // Writes the statistics accumulated since the last ApplyStepStatistics into out[0, size).
  virtual void ReadStepStatistics(double* out) const { (void)out; }
  // Updates Buffers() from `summed` (StepStatisticsSize() values: the element-wise sum of every
  // replica's ReadStepStatistics) and clears this layer's accumulation. All zeros (a sum over no
  // samples) leaves Buffers() unchanged and only clears (Pipe-SGD's fill step).
  virtual void ApplyStepStatistics(const double* summed) { (void)summed; }

  // Makes the layer compute with `owner` instead of its own tied copy named `copy_name` (the
  // copy and its owner landed on the same stage: one parameter, both gradients accumulate into
  // it). Returns false when the layer has no tied copy of that name.
  virtual bool ShareTiedParam(const std::string& copy_name, Param* owner) {
    (void)copy_name, (void)owner;
    return false;
  }
};

}  // namespace dapple::kernels

#endif  // DAPPLE_KERNELS_CPU_LAYER_H_
