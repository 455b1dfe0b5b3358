// The memory model (common/memory_model.h) applied to one stage of a plan: the sizes come from
// the planning problem's profile (parameter bytes, ActivationMemory, the cut bytes), the place
// from the plan and the problem's schedule. The analytical estimator (plan_estimator.h) and the
// simulator (plan_simulator.h) both predict a replica's memory with it, so they agree exactly.
//
// Thread safety: pure function.
#ifndef DAPPLE_COORDINATOR_PLANNER_STAGE_MEMORY_H_
#define DAPPLE_COORDINATOR_PLANNER_STAGE_MEMORY_H_

#include <string>

#include "common/memory_model.h"
#include "coordinator/planner/activation_memory.h"
#include "coordinator/planner/problem.h"

namespace dapple::coordinator {

// What one replica of stage `s` of `plan` holds at its peak under `schedule` (the problem's, or
// the one a simulation asks for). `plan` must be well formed for `problem` (0 <= s < P, contiguous
// stages, micro_batch_size > 0, devices non-empty) and `activations` built from problem.profile.
// The micro-batch's samples on a replica are memory::ReplicaRows; the profile's bytes scale
// linearly from its batch_size.
memory::ReplicaMemory PredictStageMemory(const PlanningProblem& problem, const HybridPlan& plan,
                                         int s, const ActivationMemory& activations,
                                         schedule::ScheduleKind schedule);

// "weights 4.60 MiB, activations 20.2 MiB" and ", buffers 1.00 MiB" when it holds any: a
// stage's predicted memory as the planners' memory errors word it.
std::string StageMemoryParts(const StagePrediction& stage);

}  // namespace dapple::coordinator

#endif  // DAPPLE_COORDINATOR_PLANNER_STAGE_MEMORY_H_
