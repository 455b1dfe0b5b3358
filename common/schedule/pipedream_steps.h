// PipeDream's continuous 1F1B run cut into training steps, for the runtime's per-step
// interpreter (Narayanan et al., "PipeDream: Generalized Pipeline Parallelism for DNN Training",
// SOSP 2019, section 3.2; weight stashing, section 3.3). Pure functions; thread-safe.
//
// The whole job is ONE run of T = num_steps * M micro-batches in GeneratePipeDream's order with
// an update after every M-th backward (M micro-batches per update = the job's global batch), and
// no flush: step t's program is the run's actions after update t - 1 through update t. Its
// micro-batch indices are relative to the step: j = g - t * M for global micro-batch g, so
// j in [0, M) is step t's own micro-batch and j >= M is micro-batch j % M of step t + j / M
// (only step t + 1 unless the warm-up K exceeds M), whose forward runs before update t, with
// the weights of that moment (weight stashing keeps them for its backward in a later step).
// Always j < M + K - 1 (K: PipeDreamWarmUp), so at most M + K micro-batches are referenced. Step 0
// holds the warm-up, step num_steps - 1 the cool-down. Concatenating the steps' programs (with g =
// t * M + j) gives GeneratePipeDream(P, T, stage, M) exactly.
#ifndef DAPPLE_COMMON_SCHEDULE_PIPEDREAM_STEPS_H_
#define DAPPLE_COMMON_SCHEDULE_PIPEDREAM_STEPS_H_

#include <cstdint>

#include "common/schedule/op.h"

namespace dapple::schedule {

// Compute actions (FORWARD, BACKWARD, OPTIMIZER_STEP) of step `step` in [0, num_steps) for
// `stage` of P = num_stages with M = num_micro_batches per step. Preconditions (unchecked):
// P >= 1, 0 <= stage < P, M >= 1, 0 <= step < num_steps.
OpProgram GeneratePipeDreamStepOps(int num_stages, int num_micro_batches, int stage, int64_t step,
                                   int64_t num_steps);

// The warm-up of `stage` over the whole run: min(P - stage, num_steps * M) forwards before its
// first backward; at most that many micro-batches are in flight on the stage at once.
int64_t PipeDreamWarmUp(int num_stages, int num_micro_batches, int stage, int64_t num_steps);

}  // namespace dapple::schedule

#endif  // DAPPLE_COMMON_SCHEDULE_PIPEDREAM_STEPS_H_
