// The layer ranges of Megatron's interleaved 1F1B (Narayanan et al., "Efficient Large-Scale
// Language Model Training on GPU Clusters Using Megatron-LM", SC 2021, section 2.2.2): the model
// is cut into P * v contiguous virtual stages, and pipeline rank r holds the v model chunks
// r, r + P, ..., r + (v - 1) P. Chunk c of rank r is virtual stage c * P + r, the numbering of
// common/schedule/generators.h GenerateInterleavedOps and of PlanStageSummary.chunks
// (proto/dapple/v1/job.proto), which schedule::StageChunks reads back. Pure; thread-safe.
//
// Not yet wired into MakePlan (planner.h): the plan simulator still scores contiguous stages
// only, so parallel.schedule interleaved stays refused at submit
// (common/job_spec_validate_interleaved.cc).
#ifndef DAPPLE_COORDINATOR_PLANNER_INTERLEAVED_PARTITION_H_
#define DAPPLE_COORDINATOR_PLANNER_INTERLEAVED_PARTITION_H_

#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "dapple/v1/job.pb.h"
#include "dapple/v1/plan.pb.h"

namespace dapple::coordinator {

// The model chunks of each of `num_stages` (P) ranks, `chunks` (v) each: result[r][c] is
// virtual stage c * P + r of PartitionBalanced(layer_costs, P * v) (partition.h: contiguous,
// non-empty, the largest virtual stage's cost minimal), so rank r's chunks are in layer order
// and result[r][0].first_layer() <= result[r + 1][0].first_layer().
// kInvalidArgument when num_stages < 1 or chunks < 1 ("interleaved partition needs P >= 1 and
// v >= 1 ..."), and PartitionBalanced's errors (a bad cost; fewer layers than P * v: "the model
// has 3 layers but the plan has 4 stages ...").
absl::StatusOr<std::vector<std::vector<v1::StageRange>>> PartitionInterleaved(
    const std::vector<double>& layer_costs, int num_stages, int chunks);

// Writes `chunks` (PartitionInterleaved's result) into `summary`: stage r's chunks become
// PlanStageSummary.chunks and its first_layer / last_layer chunks[r][0] (the proto's contract).
// kInvalidArgument when summary has a different number of stages than chunks has ranks, or a
// rank has no chunk; `summary` is unchanged then.
absl::Status SetStageChunks(const std::vector<std::vector<v1::StageRange>>& chunks,
                            v1::ParallelPlanSummary* summary);

}  // namespace dapple::coordinator

#endif  // DAPPLE_COORDINATOR_PLANNER_INTERLEAVED_PARTITION_H_
