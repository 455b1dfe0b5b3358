// The single-device reference: the whole model in one process, one forward and one backward on
// the whole global batch per step, no micro-batches and no pipeline. The parity harness compares
// every synchronous schedule against it (same seed, same global batch, same sample order).
// It trains as the job spec says: the learning-rate schedule (common/lr_schedule.h, by its
// update count) and global-norm clipping (common/grad_clip.h: the squared norm of every
// parameter summed in double, a tied weight once as it is one parameter here, then every
// gradient multiplied by the coefficient in fp32 before the update).
#ifndef DAPPLE_WORKER_RUNTIME_REFERENCE_TRAINER_H_
#define DAPPLE_WORKER_RUNTIME_REFERENCE_TRAINER_H_

#include <cstdint>
#include <memory>
#include <set>
#include <vector>

#include "absl/status/statusor.h"
#include "common/schedule/ranks.h"
#include "dapple/v1/job.pb.h"
#include "kernels/cpu/layer.h"
#include "kernels/cpu/optimizer.h"
#include "worker/data/dataset.h"

namespace dapple::worker {

// How the pipeline that the reference reproduces splits a step's rows (only layers with step
// statistics see the difference).
struct ReferenceRowSplit {
  // The replicas of the stage that holds each layer (ModelSpec.layers order), or empty: one
  // replica everywhere.
  std::vector<int> layer_replicas;
  // parallel.schedule pipedream: replicas take whole micro-batches (1F1B-RR).
  bool whole_micro_batches = false;
};

class ReferenceTrainer {
 public:
  // kInvalidArgument for a spec whose model cannot be built, or a `split` whose layer_replicas
  // is neither empty nor one positive count per layer. `train` must outlive the trainer.
  static absl::StatusOr<std::unique_ptr<ReferenceTrainer>> Create(
      const v1::JobSpec& spec, const Dataset* train, const ReferenceRowSplit& split = {});
  // What one Step read and computed, for oracles outside the process (tests/tools: PyTorch fed
  // the same batches must compute the same gradients).
  struct StepTrace {
    std::vector<float> inputs;     // [global_batch, input_shape...] (token ids as floats)
    std::vector<int32_t> targets;  // [global_batch, targets per sample]
    // Each parameter's gradient of the step's mean loss, in Params() order, before clipping
    // and the update (a tied weight once: it is one parameter here).
    std::vector<std::vector<float>> gradients;
  };
  // Runs global step `step` (0-based) and returns its mean loss over the global batch. Fills
  // `trace` when not null.
  double Step(int64_t step, StepTrace* trace = nullptr);
  // From now on, Step(step) computes the loss and the gradients of `step` but drops them
  // without an update (weights, optimizer state and update count unchanged): what the pipeline
  // does with a step skipped for a non-finite value (worker/runtime/gradient_exchange.h).
  void SkipUpdateOf(int64_t step) { skipped_.insert(step); }
  // The squared global gradient norm of the last Step, before clipping; 0 when
  // training.max_grad_norm is unset (computed only for clipping).
  double last_gradient_sq_norm() const { return last_sq_norm_; }
  // Mean loss and accuracy per target over `eval` (forward only; the evaluation split).
  void Evaluate(const Dataset& eval, double* loss, double* accuracy);
  // Every parameter of the model in layer order ("layer<i>.weight" / "layer<i>.bias").
  std::vector<kernels::Param*> Params();
  // Every buffer of the model in layer order (kernels/cpu/layer.h Buffers(): batch norm's
  // running statistics, "layer<i>.running_mean"); empty for a model without.
  std::vector<kernels::Param*> Buffers();

 private:
  ReferenceTrainer() = default;
  // Runs layer k's forward on acts_[k] into acts_[k + 1] (per row group when it has any).
  void ForwardLayer(size_t k, const kernels::ForwardContext& ctx);
  // Runs layer k's backward from dy into *dx (null: no input gradient).
  void BackwardLayer(size_t k, const kernels::Tensor& dy, kernels::Tensor* dx);
  // Applies every layer's step statistics (one process: its own are the sum).
  void ApplyStepStatistics();

  // One row group's forward of one layer, kept for its backward.
  struct GroupPass {
    kernels::Tensor x, y;
    kernels::LayerCache cache;
  };
  v1::JobSpec spec_;
  std::set<int64_t> skipped_;  // SkipUpdateOf
  const Dataset* train_ = nullptr;
  std::vector<std::unique_ptr<kernels::Layer>> layers_;
  std::vector<kernels::Param*> params_;
  std::vector<kernels::Param*> buffers_;
  // Per layer: its row groups (empty: the whole batch at once) and, within a step, the passes
  // over them; the whole-batch activations and caches.
  std::vector<std::vector<schedule::RowRange>> groups_;
  std::vector<std::vector<GroupPass>> passes_;
  std::vector<kernels::Tensor> acts_;
  std::vector<kernels::LayerCache> caches_;
  // The lowest layer whose backward runs: the first with parameters (the layers below it have
  // none to train, so no gradient flows past it).
  int backward_end_ = 0;
  // A step's gradients between layers and its labels, kept across steps (no allocation per
  // step).
  kernels::Tensor dy_, dx_;
  std::vector<int32_t> labels_;
  std::unique_ptr<kernels::Optimizer> optimizer_;
  std::vector<int64_t> input_shape_;
  int64_t targets_per_sample_ = 1;
  int64_t total_steps_ = 0;
  double last_sq_norm_ = 0;
  int64_t order_epoch_ = -1;
  std::vector<int64_t> order_;
};

}  // namespace dapple::worker

#endif  // DAPPLE_WORKER_RUNTIME_REFERENCE_TRAINER_H_
