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
#include <vector>

#include "absl/status/statusor.h"
#include "dapple/v1/job.pb.h"
#include "kernels/cpu/layer.h"
#include "kernels/cpu/optimizer.h"
#include "worker/data/dataset.h"

namespace dapple::worker {

class ReferenceTrainer {
 public:
  // kInvalidArgument for a spec whose model cannot be built. `train` must outlive the trainer.
  static absl::StatusOr<std::unique_ptr<ReferenceTrainer>> Create(const v1::JobSpec& spec,
                                                                  const Dataset* train);
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
  // The squared global gradient norm of the last Step, before clipping.
  double last_gradient_sq_norm() const { return last_sq_norm_; }
  // Mean loss and accuracy per target over `eval` (forward only; the evaluation split).
  void Evaluate(const Dataset& eval, double* loss, double* accuracy);
  // Every parameter of the model in layer order ("layer<i>.weight" / "layer<i>.bias").
  std::vector<kernels::Param*> Params();

 private:
  ReferenceTrainer() = default;
  v1::JobSpec spec_;
  const Dataset* train_ = nullptr;
  std::vector<std::unique_ptr<kernels::Layer>> layers_;
  std::vector<kernels::Param*> params_;
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
