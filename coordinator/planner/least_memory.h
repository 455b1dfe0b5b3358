// The straight pipeline of a given depth that needs the least memory per device, for the
// planners' "no plan fits device memory" errors: the memory they name is then what the least
// hungry plan of that depth needs, not that of whichever plan their search happened to score
// (a user's GPT was told "the best needs 74.9 MiB" on 16 and 40 MiB devices, while a plan of
// 62.1 MiB existed).
#ifndef DAPPLE_COORDINATOR_PLANNER_LEAST_MEMORY_H_
#define DAPPLE_COORDINATOR_PLANNER_LEAST_MEMORY_H_

#include <cstdint>

#include "coordinator/planner/problem.h"

namespace dapple::coordinator {

// The most layers a memory error searches with LeastMemoryPipeline (its cost is O(P L
// log(bytes)) stage predictions: about 0.2 s per depth at 1024 layers on this project's 2-vCPU
// machine).
inline constexpr int kLeastMemoryMaxLayers = 512;

// The plan of `stages` contiguous stages, one replica each on devices 0 .. stages - 1, at
// `micro_batch_size` samples per micro-batch (M = global_batch / micro_batch_size), whose
// largest stage peak (stage_memory.h PredictStageMemory under problem.schedule) is the least
// over the ways to cut the layers. Found by a binary search on the peak, each step a greedy
// check that ends every stage at the furthest layer at which it fits: optimal when a later
// stage's peak grows with its range, which it does unless a layer's output is much smaller than
// the one before it (the stage then sends less). Requires 1 <= stages <= min(layers, usable
// devices, ...), micro_batch_size dividing problem.global_batch and problem.profile.num_layers() <=
// kLeastMemoryMaxLayers. Pure; thread-compatible.
HybridPlan LeastMemoryPipeline(const PlanningProblem& problem, int stages,
                               int64_t micro_batch_size);

}  // namespace dapple::coordinator

#endif  // DAPPLE_COORDINATOR_PLANNER_LEAST_MEMORY_H_
