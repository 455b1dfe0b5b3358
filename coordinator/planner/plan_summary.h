// Turns a plan and its prediction into what users see (v1::ParallelPlanSummary: `dapplectl
// plan`, `dapplectl get`). Pure; thread-safe.
#ifndef DAPPLE_COORDINATOR_PLANNER_PLAN_SUMMARY_H_
#define DAPPLE_COORDINATOR_PLANNER_PLAN_SUMMARY_H_

#include "coordinator/planner/problem.h"
#include "dapple/v1/job.pb.h"

namespace dapple::coordinator {

// planner, schedule name, M, micro_batch_size, per stage first/last layer (and the chunks of an
// interleaved plan, StagePlan::chunks), replicas, placement
// (DeviceName of each device), the prediction's per-stage fields, bubble_fraction,
// predicted_step_ms, predicted_samples_per_second, profile_source, cluster_source,
// placement_policy, num_devices; for a plan of one replicated stage (data parallelism) with a
// prediction, pipesgd (Pipe-SGD's timing model, pipesgd_model.h, with the stage's predicted
// compute_ms and parameter bytes and problem.pipesgd_compression) and a note with its
// PipeSgdLine (what `dapplectl plan` and `get` show). worker_ids / devices / hostnames stay empty
// (the scheduler fills them).
v1::ParallelPlanSummary ToSummary(const PlanningProblem& problem, const HybridPlan& plan,
                                  const Prediction& prediction, schedule::ScheduleKind schedule);

}  // namespace dapple::coordinator

#endif  // DAPPLE_COORDINATOR_PLANNER_PLAN_SUMMARY_H_
