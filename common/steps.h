// Step arithmetic shared by the coordinator (progress, ETA) and the workers (data order).
// A step consumes one global batch; the remainder of an epoch that does not fill a global batch
// is dropped, so every step has exactly global_batch samples.
#ifndef DAPPLE_COMMON_STEPS_H_
#define DAPPLE_COMMON_STEPS_H_

#include <algorithm>
#include <cstdint>

#include "dapple/v1/job.pb.h"

namespace dapple {

// Training samples of fashion-mnist.
inline constexpr int64_t kFashionMnistTrainSize = 60000;
inline constexpr int64_t kFashionMnistTestSize = 10000;

// Training samples of the spec's dataset: data.train_samples, resolved when the job is submitted
// (the parser sets fashion-mnist's; the coordinator counts a text file's); fashion-mnist's for a
// spec built without it.
inline int64_t TrainSamples(const v1::JobSpec& spec) {
  if (spec.data().train_samples() > 0) return spec.data().train_samples();
  return spec.data().dataset().empty() || spec.data().dataset() == "fashion-mnist"
             ? kFashionMnistTrainSize
             : 0;
}

inline int64_t StepsPerEpoch(const v1::JobSpec& spec) {
  const int64_t b = spec.training().global_batch();
  return b > 0 ? TrainSamples(spec) / b : 0;
}

// The 1-based epoch of the job's `done`-th step (1-based, as steps completed): every
// StepsPerEpoch steps start a new epoch; 1 for a spec without a positive StepsPerEpoch. The
// worker's progress reports, checkpoint manifests and a resumed job's metrics use it.
inline int32_t EpochOfStep(const v1::JobSpec& spec, int64_t done) {
  const int64_t per_epoch = StepsPerEpoch(spec);
  return per_epoch > 0 && done > 0 ? static_cast<int32_t>((done - 1) / per_epoch + 1) : 1;
}

// epochs * StepsPerEpoch, capped by training.max_steps when that is > 0; 0 for a spec without
// a positive global batch or epoch count. The coordinator's progress and every worker's loop use
// this one function, so they agree on when a job ends.
inline int64_t TotalSteps(const v1::JobSpec& spec) {
  int64_t total = std::max<int64_t>(spec.training().epochs(), 0) * StepsPerEpoch(spec);
  if (spec.training().max_steps() > 0) total = std::min(total, spec.training().max_steps());
  return total;
}

// Whether the job evaluates once global step `step` (0-based) is done, by
// training.eval_every_steps N: N > 0: after steps N, 2N, 3N, ... (counted 1-based); N == 0 (the
// default): after the last step of every epoch (StepsPerEpoch); either way also after the job's
// last step (TotalSteps). A pure function of the spec, so every rank of a job evaluates after the
// same steps (the worker's loop and the runtime's PipeDream flush rule ask it).
inline bool EvaluatesAfterStep(const v1::JobSpec& spec, int64_t step) {
  const int64_t done = step + 1;
  if (done == TotalSteps(spec)) return true;
  const int64_t every = spec.training().eval_every_steps() > 0 ? spec.training().eval_every_steps()
                                                               : StepsPerEpoch(spec);
  return every > 0 && done > 0 && done % every == 0;
}

// Whether the job evaluates after some step other than its last (EvaluatesAfterStep): a
// program without a flush (pipedream) then evaluates with the next step's forwards in flight.
inline bool EvaluatesBetweenSteps(const v1::JobSpec& spec) {
  const int64_t every = spec.training().eval_every_steps() > 0 ? spec.training().eval_every_steps()
                                                               : StepsPerEpoch(spec);
  return every > 0 && every < TotalSteps(spec);
}

}  // namespace dapple

#endif  // DAPPLE_COMMON_STEPS_H_
