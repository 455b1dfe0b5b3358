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

// Activation recomputation (TrainingSpec.recompute, worker/runtime/layer_recompute.h): whether
// stage `s` of `plan` recomputes under problem.recompute. kNone: the plan's own
// StagePlan::recompute; kAll: every stage; kAuto: exactly the stages that do not fit without it,
// i.e. whose replica's peak memory without recomputation exceeds the smallest memory among the
// stage's devices (a stage that fits keeps its activations: recomputation costs a forward per
// micro-batch). The one decision the simulator, the estimator, the memory errors and the plan's
// summary share. Same preconditions as PredictStageMemory.
bool StageRecomputes(const PlanningProblem& problem, const HybridPlan& plan, int s,
                     const ActivationMemory& activations, schedule::ScheduleKind schedule);

// `plan` with every stage's StagePlan::recompute set by StageRecomputes: the choice a planner
// makes once it has its partition (the later planner, choosing schedules too, calls it per
// candidate).
HybridPlan WithRecompute(const PlanningProblem& problem, HybridPlan plan,
                         schedule::ScheduleKind schedule);

// What one replica of stage `s` of `plan` holds at its peak under `schedule` (the problem's, or
// the one a simulation asks for), recomputing as StageRecomputes says. `plan` must be well formed
// for `problem` (0 <= s < P, contiguous stages, micro_batch_size > 0, devices non-empty) and
// `activations` built from problem.profile. The micro-batch's samples on a replica are
// memory::ReplicaRows; the profile's bytes scale linearly from its batch_size.
memory::ReplicaMemory PredictStageMemory(const PlanningProblem& problem, const HybridPlan& plan,
                                         int s, const ActivationMemory& activations,
                                         schedule::ScheduleKind schedule);

// "weights 4.60 MiB, activations 20.2 MiB" and ", buffers 1.00 MiB" when it holds any: a
// stage's predicted memory as the planners' memory errors word it.
std::string StageMemoryParts(const StagePrediction& stage);

}  // namespace dapple::coordinator

#endif  // DAPPLE_COORDINATOR_PLANNER_STAGE_MEMORY_H_
