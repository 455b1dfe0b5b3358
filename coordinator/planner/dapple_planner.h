// DAPPLE's planner (Fan et al., "DAPPLE: A Pipelined Data Parallel Approach for Training Large
// Models", PPoPP 2021, section 5): the search over pipeline depth, stage boundaries, replicas
// per stage, placement and micro-batch count. docs/planner.md has the formulas with their
// sources and the restrictions of the search. Its pieces other planners reuse have headers of
// their own, included here: placement.h (the placement policies, section 5.3) and
// plan_estimator.h (the analytical latency model around a pivot stage, section 5.2, and the
// per-device memory model). The search itself is split by step: stage_budget.h and
// dapple_candidates.h (candidate layouts), dapple_layout.h (analytical scoring),
// dapple_refine.h (local search), dapple_simulated_choice.h (re-scoring and polishing by
// simulation). Pure functions; thread-safe.
#ifndef DAPPLE_COORDINATOR_PLANNER_DAPPLE_PLANNER_H_
#define DAPPLE_COORDINATOR_PLANNER_DAPPLE_PLANNER_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "coordinator/planner/placement.h"       // IWYU pragma: export
#include "coordinator/planner/plan_estimator.h"  // IWYU pragma: export
#include "coordinator/planner/planners.h"
#include "coordinator/planner/problem.h"

namespace dapple::coordinator {

// Knobs of the DAPPLE search (docs/planner.md, "DAPPLE planner"); the defaults are what
// RunPlanner uses.
struct DapplePlannerOptions {
  // Re-scoring with SimulatePlan: up to this many distinct layouts (stages, replicas, devices),
  // best by the analytical model first, each at its `simulated_sizes` best micro-batch sizes
  // by the model plus the largest M that fits; stop early (after two layouts) once the
  // simulated work, the sum of P * M, exceeds simulation_budget.
  int simulated_layouts = 24;
  int simulated_sizes = 3;
  int64_t simulation_budget = int64_t{1} << 19;
  // Then the best plan's stage boundaries are moved by +-1, 2, 4, ... layers while the
  // simulator finds it faster (first improvement, up to polish_rounds passes, P <= 64), within
  // polish_budget of simulated work.
  int polish_rounds = 8;
  int64_t polish_budget = int64_t{1} << 18;
  // Candidates improved by local search on the analytical model (boundary moves by +-1, 2, 4,
  // ..., replica doubling / halving, splitting or merging stages, another placement policy).
  int refined_candidates = 6;
  int refine_iterations = 40;
  // Also run the dp, uniform and balanced baselines (their plans are points of DAPPLE's search
  // space) and keep the best; off only in tests of the search itself.
  bool include_natural_candidates = true;
};

// DAPPLE's planner: searches pipeline depth P, stage boundaries, replicas per stage (powers of
// two dividing the micro-batch; under schedule pipedream any power of two up to M, since
// 1F1B-RR never splits a micro-batch; at most max_replicas, sum at most the usable devices),
// placement policy and micro-batch count M with the analytical model and memory limit of
// plan_estimator.h,
// then re-scores the best candidates with SimulatePlan and returns the best simulated plan that
// fits memory. Restrictions that keep it fast (docs/planner.md): replica counts are powers of
// two; depths 1..64 and then about 12% apart; stage boundaries come from a bisection on the
// per-step bottleneck (plus local moves), not from enumerating every split; micro-batch sizes
// as MicroBatchSizes (P * M <= kMaxStageMicroBatches). The baselines dp, uniform and balanced
// are points of its space and are always considered, so it is never slower than they are.
// Errors as RunPlanner (planners.h).
absl::StatusOr<PlannedJob> PlanDapple(const PlanningProblem& problem,
                                      const DapplePlannerOptions& options = {});

}  // namespace dapple::coordinator

#endif  // DAPPLE_COORDINATOR_PLANNER_DAPPLE_PLANNER_H_
