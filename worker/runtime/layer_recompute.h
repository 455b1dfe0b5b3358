// Activation recomputation for a stage's CPU layers (Chen, Xu, Zhang and Guestrin, "Training
// deep nets with sublinear memory cost", 2016, section 3: drop the activations of a segment
// after its forward and compute them again for its backward; here the segment is the whole
// stage, as Megatron-LM's full recomputation, Korthikanti et al. 2022, section 4.1).
//
// A recomputing stage keeps per micro-batch in flight only its input (and its output until the
// runtime sends it or the loss reads it), plus the ForwardContext of its forward. Every forward
// runs through one scratch set of layer outputs and caches, reused by every micro-batch; before
// the backward of a micro-batch, Replay runs the same forward again into that scratch set, and
// the backward reads it. The recomputed forward is exact: the layers are deterministic, the
// weights are those of the first forward (synchronous schedules update after every backward;
// PipeDream swaps the stashed version in around the whole BACKWARD action), and dropout's masks
// are a pure function of the context (kernels/cpu/layer.h). The replay sets
// ForwardContext::recompute, so batch norm does not add the micro-batch to the step statistics a
// second time.
//
// Memory (common/memory_model.h, "activations"): the scratch set holds one micro-batch's
// activations (every layer's output and saved tensors), at the largest rows it ran.
//
// The replayed set lives until the next Forward or Replay: a backward split into BackwardInput
// and a later BackwardWeight (Zero Bubble's B and W) with other micro-batches' work in between
// would need the layers' caches of its B kept until its W; not supported yet: submission refuses
// training.recompute with parallel.schedule zb-h1 / zb-h2, and a recomputing backend answers
// BackwardInput with SplitBackwardWithRecomputeError().
//
// Thread safety: one thread, like the backend that owns it.
#ifndef DAPPLE_WORKER_RUNTIME_LAYER_RECOMPUTE_H_
#define DAPPLE_WORKER_RUNTIME_LAYER_RECOMPUTE_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "kernels/cpu/layer.h"
#include "worker/runtime/step_statistics.h"

namespace dapple::worker {

// kFailedPrecondition: a recomputing stage cannot split its backward (see above).
absl::Status SplitBackwardWithRecomputeError();

class LayerRecompute {
 public:
  // `layers` (not owned) must outlive this object and keep their number.
  explicit LayerRecompute(const LayerList* layers);

  // The forward of `x` ([N, stage input...]) through every layer into the scratch set, with
  // `ctx` as given (a training forward accumulates step statistics once here); copies the last
  // layer's output into *y (resized to [N, stage output...]).
  void Forward(const kernels::Tensor& x, const kernels::ForwardContext& ctx, kernels::Tensor* y);

  // The forward of `x` again with `ctx` (that of the micro-batch's Forward; recompute is set
  // here), refilling the scratch set for the backward: afterwards Input(k, x), Output(k) and
  // Cache(k) are layer k's x, y and cache as the first forward had them. `ctx.training` must be
  // true (an evaluation forward has no backward).
  void Replay(const kernels::Tensor& x, kernels::ForwardContext ctx);

  // Layer k's input after Forward or Replay of `x`: x itself for k = 0.
  const kernels::Tensor& Input(int k, const kernels::Tensor& x) const {
    return k == 0 ? x : acts_[k];
  }
  const kernels::Tensor& Output(int k) const { return acts_[k + 1]; }
  kernels::LayerCache* Cache(int k) { return &caches_[k]; }

  // Bytes of allocated capacity of the scratch set (outputs, saved and gradient tensors).
  int64_t HeldBytes() const;

 private:
  void Run(const kernels::Tensor& x, const kernels::ForwardContext& ctx);

  const LayerList* layers_;
  std::vector<kernels::Tensor> acts_;  // acts_[k + 1] = layer k's output; acts_[0] unused
  std::vector<kernels::LayerCache> caches_;
};

}  // namespace dapple::worker

#endif  // DAPPLE_WORKER_RUNTIME_LAYER_RECOMPUTE_H_
