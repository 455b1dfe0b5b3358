// PipeDream's continuous 1F1B run cut into training steps, for the runtime's per-step
// interpreter (Narayanan et al., "PipeDream: Generalized Pipeline Parallelism for DNN Training",
// SOSP 2019, section 3.2; weight stashing, section 3.3; 1F1B-RR, section 3.2 "1F1B-RR"). Pure
// functions; thread-safe.
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
//
// 1F1B-RR (stage replicas): stage s runs on D_s replicas and whole micro-batches go round-robin,
// global micro-batch g to replica g % D_s of every stage (PipeDreamReplicaOf). The stage as a
// whole runs the 1F1B order above with warm-up K_s = D_s + D_{s+1} + ... + D_{P-1}: the workers
// of this stage and of every later one, PipeDream's NOAM ("number of optimal active
// mini-batches", ceil(workers / input-stage replicas) per input-stage replica) for every stage,
// and P - s with one replica per stage. Replica r runs that order filtered to its own
// micro-batches, with every update: any execution of the unreplicated order executes the
// filtered programs too, so they are deadlock-free whatever the costs, and every micro-batch's
// forward and backward fall between the same updates as without replicas (the same weight
// versions). Over consecutive g, a window of K_s in flight holds at most ceil(K_s / D_s) of one
// replica's micro-batches: PipeDreamReplicaInFlight. The updates of a stage's replicas are
// synchronous (an AllReduce of their gradient sums before each, added by the lowering pass).
#ifndef DAPPLE_COMMON_SCHEDULE_PIPEDREAM_STEPS_H_
#define DAPPLE_COMMON_SCHEDULE_PIPEDREAM_STEPS_H_

#include <cstdint>
#include <vector>

#include "common/schedule/op.h"

namespace dapple::schedule {

// One PipeDream run.
struct PipeDreamLayout {
  std::vector<int> replicas;  // D_s per stage (P entries, each >= 1)
  int num_micro_batches = 1;  // M per step (= per update)
  int64_t num_steps = 1;      // steps (updates) of the run
  // Global index of the run's first micro-batch (first step * M): round-robin is over global
  // indices, so a run resumed from a checkpoint keeps every micro-batch on the same replica.
  int64_t first_micro_batch = 0;
  // Empty, or P entries replacing the warm-ups K_s (tests: an unreplicated run with the warm-ups
  // of a replicated one trains exactly like it). Must be non-increasing and >= 1.
  std::vector<int64_t> warm_ups;
};

// K_s of `stage`: layout.warm_ups[stage] when given, else min(D_stage + ... + D_{P-1},
// num_steps * M). The stage's replicas together run K_s forwards before their first backward,
// and hold at most K_s micro-batches in flight at once.
int64_t PipeDreamWarmUp(const PipeDreamLayout& layout, int stage);

// The most micro-batches one replica of `stage` holds in flight (activations stashed): at most
// ceil(K_s / D_s) (exactly that for a long enough run), which also bounds the weight versions it
// keeps. With one replica per stage: P - stage.
int64_t PipeDreamReplicaInFlight(const PipeDreamLayout& layout, int stage);

// An upper bound of the weight versions one replica of `stage` keeps (weight stashing, without
// vertical sync): the current one plus at most one per micro-batch in flight across an update.
// At an update the stage holds the K_s - 1 consecutive micro-batches after its last backward,
// so this is ceil((K_s - 1) / D_s) + 1: P - stage with one replica per stage (PipeDream's
// bound), on a replicated stage possibly one more than PipeDreamReplicaInFlight. Reached when
// those micro-batches ran their forwards under different versions (M small); with M large they
// share one or two.
int64_t PipeDreamReplicaVersions(const PipeDreamLayout& layout, int stage);

// The replica of a stage with `replicas` replicas that runs global micro-batch `global_mb`.
inline int PipeDreamReplicaOf(int64_t global_mb, int replicas) {
  return static_cast<int>(global_mb % replicas);
}

// Compute actions (FORWARD, BACKWARD, OPTIMIZER_STEP) of step `step` in [0, num_steps) of the
// run for replica `replica` of `stage`, micro-batch indices relative to the step (above). Every
// step ends with its OPTIMIZER_STEP, also for a replica that has no micro-batch of its own in
// it. Preconditions (unchecked): the layout as documented, 0 <= stage < P,
// 0 <= replica < D_stage, 0 <= step < num_steps.
OpProgram GeneratePipeDreamStepOps(const PipeDreamLayout& layout, int stage, int replica,
                                   int64_t step);

// One replica per stage: GeneratePipeDreamStepOps({1,...,1}, M, num_steps) for `stage`.
OpProgram GeneratePipeDreamStepOps(int num_stages, int num_micro_batches, int stage, int64_t step,
                                   int64_t num_steps);

// One replica per stage: min(P - stage, num_steps * M).
int64_t PipeDreamWarmUp(int num_stages, int num_micro_batches, int stage, int64_t num_steps);

}  // namespace dapple::schedule

#endif  // DAPPLE_COMMON_SCHEDULE_PIPEDREAM_STEPS_H_
