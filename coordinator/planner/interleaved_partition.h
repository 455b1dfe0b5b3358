// The layer ranges of Megatron's interleaved 1F1B (Narayanan et al., "Efficient Large-Scale
// Language Model Training on GPU Clusters Using Megatron-LM", SC 2021, section 2.2.2): the model
// is cut into P * v contiguous virtual stages, and pipeline rank r holds the v model chunks
// r, r + P, ..., r + (v - 1) P. Chunk c of rank r is virtual stage c * P + r, the numbering of
// common/schedule/generators.h GenerateInterleavedOps and of PlanStageSummary.chunks
// (proto/dapple/v1/job.proto), which schedule::StageChunks reads back. Pure; thread-safe.
//
// MakePlan (planner.h) plans parallel.schedule interleaved with InterleavedPlan; the plan
// simulator (plan_simulator.h) scores it per virtual stage (VirtualStagesOf).
#ifndef DAPPLE_COORDINATOR_PLANNER_INTERLEAVED_PARTITION_H_
#define DAPPLE_COORDINATOR_PLANNER_INTERLEAVED_PARTITION_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "coordinator/planner/problem.h"
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

// One virtual stage of a plan: its layers and the pipeline rank (plan stage) that runs it.
struct VirtualStage {
  int first_layer = 0;  // inclusive
  int last_layer = 0;   // inclusive
  int rank = 0;         // index into HybridPlan::stages
};

// v of `plan`: the chunks of its first stage (StagePlan::chunks), 1 when it has none.
int ChunksOf(const HybridPlan& plan);

// The virtual stages of `plan` in pipeline order: with chunks (v > 1) the P * v chunks,
// virtual stage k = chunk k / P of rank k % P; without, its P stages. Precondition (unchecked):
// every stage has v chunks or all have none.
std::vector<VirtualStage> VirtualStagesOf(const HybridPlan& plan);

// The interleaved plan of `problem` (its schedule kInterleaved, num_stages P >= 1, interleave v
// >= 1, micro_batch_size > 0): PartitionInterleaved over the profile's per-layer forward +
// backward ms, rank r on `replicas` devices r * replicas .. (r + 1) * replicas - 1 (split-concat),
// planner `planner`. Errors: PartitionInterleaved's; kInvalidArgument when micro_batch_size
// does not divide global_batch or replicas < 1.
absl::StatusOr<HybridPlan> InterleavedPlan(const PlanningProblem& problem, int replicas,
                                           const std::string& planner);

}  // namespace dapple::coordinator

#endif  // DAPPLE_COORDINATOR_PLANNER_INTERLEAVED_PARTITION_H_
