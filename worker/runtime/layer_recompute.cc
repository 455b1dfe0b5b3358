#include "worker/runtime/layer_recompute.h"

#include "worker/runtime/stage_backend.h"

namespace dapple::worker {

absl::Status SplitBackwardWithRecomputeError() {
  return absl::FailedPreconditionError(
      "a recomputing stage cannot split its backward into BACKWARD_INPUT and BACKWARD_WEIGHT "
      "(zero-bubble schedules): the replayed activations of one micro-batch do not outlive the "
      "next forward; run the job with training.recompute none or a 1F1B schedule");
}

LayerRecompute::LayerRecompute(const LayerList* layers)
    : layers_(layers), acts_(layers->size() + 1), caches_(layers->size()) {}

void LayerRecompute::Run(const kernels::Tensor& x, const kernels::ForwardContext& ctx) {
  for (size_t k = 0; k < layers_->size(); ++k) {
    (*layers_)[k]->Forward(Input(static_cast<int>(k), x), &acts_[k + 1], &caches_[k], ctx);
  }
}

void LayerRecompute::Forward(const kernels::Tensor& x, const kernels::ForwardContext& ctx,
                             kernels::Tensor* y) {
  Run(x, ctx);
  // A copy, not a swap: the scratch output keeps its capacity, so the set stops allocating
  // after the first micro-batch.
  *y = acts_.back();
}

void LayerRecompute::Replay(const kernels::Tensor& x, kernels::ForwardContext ctx) {
  ctx.recompute = true;
  Run(x, ctx);
}

int64_t LayerRecompute::HeldBytes() const {
  int64_t bytes = 0;
  for (const kernels::Tensor& t : acts_) bytes += HeldBytesOf(t);
  for (const kernels::LayerCache& c : caches_) {
    for (const kernels::Tensor& t : c.saved) bytes += HeldBytesOf(t);
    for (const kernels::Tensor& t : c.grads) bytes += HeldBytesOf(t);
  }
  return bytes;
}

}  // namespace dapple::worker
