// Part of DAPPLE's planner search (dapple_planner.h; docs/planner.md, "DAPPLE planner", step 4):
// the simulation-driven end of the search. The analytical model ranks the layouts; SimulatePlan
// (plan_simulator.h, the judge every planner is compared by) picks among the best of them and
// then polishes the winner's stage boundaries. Both stop within a budget of simulated work.
// Pure; thread-safe. Internal to the planner.
#ifndef DAPPLE_COORDINATOR_PLANNER_DAPPLE_SIMULATED_CHOICE_H_
#define DAPPLE_COORDINATOR_PLANNER_DAPPLE_SIMULATED_CHOICE_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "coordinator/planner/dapple_layout.h"
#include "coordinator/planner/dapple_planner.h"
#include "coordinator/planner/planners.h"
#include "coordinator/planner/problem.h"

namespace dapple::coordinator::dapple_search {

// Stage-micro-batches SimulatePlan runs for `plan` (the unit of the simulation budgets): P M for
// one synchronous step; pipedream's steady state simulates (2P + M - 1) / M + 4 updates of M.
int64_t SimulationWork(const PlanningProblem& problem, const HybridPlan& plan);

// Re-scores `finalists` (best estimate first) by simulation: up to options.simulated_layouts
// distinct layouts in that order, each at its options.simulated_sizes best micro-batch sizes by
// the model plus the largest M that fits, stopping once options.simulation_budget of work is
// spent and two layouts are done. Returns the fastest simulated plan that fits memory (ties
// within a relative 1e-9: the smaller estimate, then the larger M), or nullopt when none does.
// Errors: SimulatePlan's.
absl::StatusOr<std::optional<PlannedJob>> ChooseBySimulation(const LayoutScorer& scorer,
                                                             const std::vector<Scored>& finalists,
                                                             const DapplePlannerOptions& options);

// Hill-climbs `job`'s stage boundaries with the simulator (same devices and M): moves the cut
// after each stage by +-1, 2, 4, ... layers (up to L / 4P) and takes the first move that fits
// memory and is faster by a relative 1e-9, for up to options.polish_rounds passes and
// options.polish_budget of simulated work; only for 2 <= P <= 64. `job` keeps its plan and
// prediction when nothing improves. Errors: SimulatePlan's.
absl::Status PolishBySimulation(const LayoutScorer& scorer, const DapplePlannerOptions& options,
                                PlannedJob& job);

}  // namespace dapple::coordinator::dapple_search

#endif  // DAPPLE_COORDINATOR_PLANNER_DAPPLE_SIMULATED_CHOICE_H_
