// The planners, selected by name, all scored by the same simulator (plan_simulator.h):
//   dapple     DAPPLE's planner (Fan et al., PPoPP 2021, section 5): search over pipeline depth,
//              stage boundaries, replicas per stage, placement (fresh_first, append_first,
//              scatter_first) and micro-batch count, with DAPPLE's latency model (warm-up,
//              steady and ending phases around a pivot stage) and a memory limit per device.
//   pipedream  PipeDream's planner (Narayanan et al., SOSP 2019, section 3.1): hierarchical
//              dynamic program minimising the slowest stage (with replication) level by level
//              (devices in a node, then nodes) with each level's bandwidth.
//   dp         pure data parallelism: P = 1, every device a replica.
//   uniform    equal layer counts over P stages, one device per stage.
//   balanced   balance-by-time (torchgpipe's block partition, Kim et al. 2020): P contiguous
//              stages minimising the slowest stage's time, one device per stage.
//   pipedream-code  PipeDream's planner as its published code plans (pipedream_code_planner.h):
//              no fixed depth, any replica count; for jobs only with schedule pipedream (1F1B-RR
//              runs any count; the synchronous schedules split micro-batches evenly). Not in
//              PlannerNames(): it refuses a fixed num_stages and a replica limit between 1 and
//              the usable devices, which the other planners all take.
// Pure functions; thread-safe.
#ifndef DAPPLE_COORDINATOR_PLANNER_PLANNERS_H_
#define DAPPLE_COORDINATOR_PLANNER_PLANNERS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "coordinator/planner/problem.h"

namespace dapple::coordinator {

// "dapple", "pipedream", "dp", "uniform", "balanced": the planners that take every
// PlanningProblem. RunPlanner also knows kPipeDreamCodePlanner.
const std::vector<std::string>& PlannerNames();

inline constexpr char kPipeDreamCodePlanner[] = "pipedream-code";

struct PlannedJob {
  HybridPlan plan;
  Prediction prediction;  // SimulatePlan(problem, plan, problem.schedule)
};

// Runs planner `name` on `problem` and scores its plan with SimulatePlan under
// problem.schedule. Honours problem.num_stages (fixed P), max_devices, max_replicas and
// micro_batch_size (0: the planner picks M; planners without a choice use the largest M whose
// plan fits memory).
// Errors, one line each:
//   kInvalidArgument: unknown name ("planner 'foo' is unknown; known: dapple, ..."); an empty
//     profile; global_batch <= 0; micro_batch_size not dividing global_batch; L < P ("the model
//     has 3 layers but the plan has 4 stages: every stage needs at least one layer"); P larger
//     than the devices; dp with max_replicas below the device count; pipedream-code with a
//     fixed num_stages, with 1 < max_replicas < the usable devices, or with no micro-batch size
//     that gives every replica one per step (PipeDreamCodeOptionsFor, PlanPipeDreamCode).
//   kResourceExhausted: no plan of this planner fits device memory, naming the memory the best
//     plan would need per device and the device memory ("planner dapple: no plan fits device memory: the best
//     needs 21.4 GiB on a device (stage 0: weights 9.13 GiB, activations 12.3 GiB) but devices
//     have 16.0 GiB"; sizes by FormatBytes / FormatBytesApart, common/profile/format_bytes.h).
absl::StatusOr<PlannedJob> RunPlanner(absl::string_view name, const PlanningProblem& problem);

}  // namespace dapple::coordinator

#endif  // DAPPLE_COORDINATOR_PLANNER_PLANNERS_H_
