// The learning rate of each optimizer update (job spec training.lr_schedule; docs/job_spec.md),
// computed here and nowhere else: every backend's update (CPU, CUDA, emulated), the reference
// trainer and Pipe-SGD's updater ask this function for the rate of their update count, so the
// schedules train alike and a job resumed from a checkpoint (which stores the update count)
// continues exactly.
//
// Thread safety: pure functions.
#ifndef DAPPLE_COMMON_LR_SCHEDULE_H_
#define DAPPLE_COMMON_LR_SCHEDULE_H_

#include <cstdint>

#include "dapple/v1/job.pb.h"

namespace dapple {

// The learning rate of update `update` (0-based: the number of updates applied before it) of a
// job of `total_steps` steps (TotalSteps of its spec), with lr = training.optimizer.lr,
// W = lr_schedule.warmup_steps, E = lr_schedule.decay_steps (0: total_steps) and
// min_lr = lr_schedule.min_lr:
//   update < W            lr * (update + 1) / W                       (linear warm-up)
//   W <= update < E       decay "cosine": min_lr + (lr - min_lr) * (1 + cos(pi * (update - W) /
//                         (E - W))) / 2 (Loshchilov & Hutter, "SGDR", ICLR 2017, without
//                         restarts); decay "none" (or empty): lr
//   update >= max(W, E)   min_lr under cosine, lr under none
// Without lr_schedule: lr for every update. A negative update counts as 0. The result is a
// double; each backend rounds it as it rounds a constant lr (the CPU SGD kernel to float).
double LearningRate(const v1::TrainingSpec& training, int64_t update, int64_t total_steps);

}  // namespace dapple

#endif  // DAPPLE_COMMON_LR_SCHEDULE_H_
