// The planner of this version: JobSpec -> ParallelPlan (stage boundaries, rank programs and the
// simulator's bubble estimate), one replica per stage (D = 1). Pure (no I/O); thread-safe.
//
// Steps:
//   1. P: parallel.stage_ranges.size() for planner "manual"; otherwise parallel.stages, or
//      parallel.devices when stages is 0 (auto). P must be in [1, parallel.devices].
//   2. Layer costs from InferLayers (common/model_info.h): forward_flops + backward_flops per
//      sample plus kLayerOverheadFlops, so layers without arithmetic still weigh something.
//   3. Stages: "balanced" (also when planner is empty) -> PartitionBalanced (minimise the most
//      expensive stage), "uniform" -> PartitionUniform (equal layer counts), "manual" -> the
//      spec's stage_ranges, checked by CheckPartition.
//   4. M = global_batch / micro_batch; programs = schedule::BuildPrograms(schedule, P, M).
//   5. schedule::Simulate with per-stage forward / backward costs proportional to each stage's
//      forward / backward cost (MFLOP per sample) gives bubble_fraction.
#ifndef DAPPLE_COORDINATOR_PLANNER_PLANNER_H_
#define DAPPLE_COORDINATOR_PLANNER_PLANNER_H_

#include <vector>

#include "absl/status/statusor.h"
#include "common/model_info.h"
#include "dapple/v1/job.pb.h"
#include "dapple/v1/plan.pb.h"

namespace dapple::coordinator {

// Per-layer fixed cost (FLOP-equivalents per sample) added to every layer's estimate: a stand-in
// for kernel launch and memory traffic that keeps cost-free layers (flatten) from being free.
inline constexpr double kLayerOverheadFlops = 1000;

// forward_flops + backward_flops + kLayerOverheadFlops for each layer.
std::vector<double> LayerCosts(const std::vector<LayerInfo>& layers);

// The number of stages P the spec asks for (step 1 above). kInvalidArgument naming the field
// when P < 1 or P > parallel.devices.
absl::StatusOr<int> ResolveNumStages(const v1::JobSpec& spec);

// Plans `spec` (steps above). The summary has planner and schedule names, M, micro-batch size,
// one PlanStageSummary per stage (first/last layer, replicas 1, compute_flops = forward +
// backward FLOPs per sample without the overhead, worker_ids empty: the scheduler fills them)
// and bubble_fraction; programs[s] is stage s's RankProgram.
// Errors (kInvalidArgument unless noted), one line each: InferLayers' errors; an unknown planner
// ("parallel.planner 'foo' is unknown; known: balanced, uniform, manual") or schedule name;
// L < P; bad stage_ranges; micro_batch <= 0 or not dividing global_batch; BuildPrograms' and
// Simulate's errors (kFailedPrecondition for a schedule that deadlocks).
absl::StatusOr<v1::ParallelPlan> MakePlan(const v1::JobSpec& spec);

}  // namespace dapple::coordinator

#endif  // DAPPLE_COORDINATOR_PLANNER_PLANNER_H_
