// Part of DAPPLE's planner search (dapple_planner.h; docs/planner.md, "DAPPLE planner", step 2):
// the candidate layouts, each the smallest per-step bottleneck of its family under the budget
// rule `budget` is set to (stage_budget.h), found by bisection on the budget T. Placement by
// DAPPLE's policies (section 5.3, placement.h). Pure functions of `budget`; thread-safe while
// its settings do not change. Internal to the planner.
#ifndef DAPPLE_COORDINATOR_PLANNER_DAPPLE_CANDIDATES_H_
#define DAPPLE_COORDINATOR_PLANNER_DAPPLE_CANDIDATES_H_

#include <vector>

#include "coordinator/planner/dapple_layout.h"
#include "coordinator/planner/stage_budget.h"

namespace dapple::coordinator::dapple_search {

// Family 1: P stages with the same replica count r each (every count of
// budget.replica_counts()), for every depth of CandidateDepths (or the fixed num_stages),
// placed by each policy of kPlacementPolicies (skipping a placement equal to an earlier
// policy's); boundaries by the smallest T Greedy accepts (MinBudget), then Balanced within it.
// Depths or placements no budget fits are left out.
std::vector<Layout> UniformReplicaLayouts(const StageBudget& budget);

// Family 2: any replica counts per stage. A dynamic program over the devices used, filling
// stages from the last layer backwards on contiguous devices from the top of the usable range
// (append-first mirrored), keeping per device count the plan that covers the most layers within
// budget T; bisection on T (relative 1e-6). Up to four layouts (most devices used first), each
// preceded by its Balanced repartition when that has as many stages. Empty when none fits.
std::vector<Layout> ReverseDpLayouts(const StageBudget& budget);

}  // namespace dapple::coordinator::dapple_search

#endif  // DAPPLE_COORDINATOR_PLANNER_DAPPLE_CANDIDATES_H_
